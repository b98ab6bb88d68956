"""A live event stream's watch on its app's stop (``events._live``): the stop ends the
stream at once, and the watch goes with the stream however it ends, so a stopped stream
leaves nothing for the stop to wake."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.api import events
from proxy.bus import SESSION_GONE
from proxy.stopping import StopClock


class _Reads:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def due(self, now: float, every: float) -> float:
        if self.fail:
            raise RuntimeError("set-up failed")
        return now + 100.0  # no catch-up within a test


def _live(stop: StopClock, queue: asyncio.Queue[Any], reads: _Reads | None = None) -> Any:
    async def connected() -> bool:
        return False

    request = SimpleNamespace(state=SimpleNamespace(stop=stop), is_disconnected=connected)
    session = ("t", "s", datetime.now(UTC))
    cursor = SimpleNamespace(gone=False)
    return events._live(request, None, session, queue, cursor, reads or _Reads())  # type: ignore[arg-type]


async def test_the_stop_ends_a_waiting_stream_and_takes_its_watch() -> None:
    stop, queue = StopClock(), asyncio.Queue[Any]()
    live = _live(stop, queue)
    waiting = asyncio.ensure_future(anext(live, None))
    await asyncio.sleep(0.01)
    assert stop._begins, "the stream watches the stop while it waits"
    stop.begin()
    assert await asyncio.wait_for(waiting, 2) is None  # ended at once, no frame of its own
    assert not stop._begins


async def test_a_stream_ended_by_its_session_leaves_no_watch() -> None:
    stop, queue = StopClock(), asyncio.Queue[Any]()
    queue.put_nowait(SESSION_GONE)
    assert [f async for f in _live(stop, queue)] == []
    assert not stop._begins


async def test_a_stream_closed_unstarted_or_failing_to_set_up_leaves_no_watch() -> None:
    stop, queue = StopClock(), asyncio.Queue[Any]()
    await _live(stop, queue).aclose()
    with pytest.raises(RuntimeError):
        await anext(_live(stop, queue, _Reads(fail=True)))
    assert not stop._begins
