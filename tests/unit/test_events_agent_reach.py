"""An event stream of a proxy key limited to some agents is held to the session's agent by
the catch-up read it makes anyway: that one statement reads the agent with the events, so
the periodic check costs no statement of its own, and the replay as the stream opens is
judged too (a request of another key may move the session between the key's check as the
stream arrived and that replay). Before, the periodic check read the agent in a statement
of its own, and the replay sent the session's events unjudged."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.api import events
from proxy.auth import PROXY_KEY
from proxy.bus import BusEvent
from proxy.config import AuthKeyConfig
from proxy.stopping import StopClock
from proxy.store.db import DatabaseUnavailable

LIMITED = AuthKeyConfig(key_env="CASCADE_TEST_LIMITED", tenant="t", agents=("reviewer",))
AUTH = SimpleNamespace(keys=(LIMITED,))  # the config in force: the key, kept
USAGE = {"name": "context.usage", "data": {}, "settled": True}


class _Bus:
    """Hands the stream a queue holding ``live``: events published before it read them."""

    def __init__(self, live: tuple[BusEvent, ...] = ()) -> None:
        self.live = live

    @contextlib.asynccontextmanager
    async def subscribe(self, tenant: str, session_id: str) -> AsyncIterator[asyncio.Queue[Any]]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        for event in self.live:
            queue.put_nowait(event)
        yield queue


class _Request:
    scope = {PROXY_KEY: LIMITED}
    state = SimpleNamespace(
        config=SimpleNamespace(current=SimpleNamespace(auth=AUTH)), stop=StopClock()
    )

    def __init__(self) -> None:
        self.gone = False

    async def is_disconnected(self) -> bool:
        return self.gone


async def _frames(monkeypatch: pytest.MonkeyPatch, reads: list[Any]) -> list[dict[str, Any]]:
    """The frames a limited key's stream sends on ``reads`` (what each catch-up finds), its
    client leaving after the first frame; no statement but the catch-up's is allowed."""
    pending = iter(reads)

    async def fetch(pool: Any, **kwargs: Any) -> Any:
        return next(pending)

    async def agent(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("the agent was read in a statement of its own")

    monkeypatch.setattr(events.store, "fetch_session_events_after", fetch)
    monkeypatch.setattr(events.sessions, "fetchval_agent", agent)
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", 0.01)
    request = _Request()
    frames = []
    stream = events._stream(request, None, _Bus(), ("t", "s", datetime.now(UTC)), 0)  # type: ignore[arg-type]
    async for frame in stream:
        if frame is events.LIVE:  # the replay's end: the client waits on for a frame
            continue
        frames.append(frame)
        request.gone = True
    return frames


async def test_the_periodic_check_reads_the_agent_with_the_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = [("reviewer", []), ("reviewer", [{**USAGE, "id": 7}])]
    frames = await _frames(monkeypatch, reads)
    assert frames == [{"event": "context.usage", "data": "{}", "id": "7"}]


async def test_a_catch_up_that_finds_another_agent_sends_nothing_and_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert await _frames(monkeypatch, [("reviewer", []), ("coder", [{**USAGE, "id": 7}])]) == []


async def test_the_replay_as_the_stream_opens_is_judged_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert await _frames(monkeypatch, [("coder", [{**USAGE, "id": 7}])]) == []


async def test_live_frames_queued_together_are_judged_by_one_read_of_the_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A live frame waits for a read of the session's agent (it may be the first of another
    agent's step); the frames queued behind it as that read starts were published before
    it, so the one read judges them too, rather than one statement per frame."""
    agents = ["reviewer"]
    reads: list[str] = []

    async def agent(*args: Any, **kwargs: Any) -> str:
        reads.append(agents[0])
        return agents[0]

    async def fetch(pool: Any, **kwargs: Any) -> Any:
        return ("reviewer", [])

    monkeypatch.setattr(events.store, "fetch_session_events_after", fetch)
    monkeypatch.setattr(events.sessions, "fetchval_agent", agent)
    live = tuple(BusEvent("session.message.delta.appended", {"delta": d}) for d in "abc")
    request = _Request()
    stream = events._stream(request, None, _Bus(live), ("t", "s", datetime.now(UTC)), 0)  # type: ignore[arg-type]
    frames = []
    async for frame in stream:
        frames.append(frame)
        request.gone = len(frames) == 4
    assert frames[0] is events.LIVE  # the replay (nothing) ended
    assert [f["data"] for f in frames[1:]] == ['{"delta": "a"}', '{"delta": "b"}', '{"delta": "c"}']
    assert reads == ["reviewer"]
    agents[0] = "coder"  # the session moved: the next stream's first live frame ends it
    request = _Request()
    stream = events._stream(request, None, _Bus(live), ("t", "s", datetime.now(UTC)), 0)  # type: ignore[arg-type]
    assert [frame async for frame in stream] == [events.LIVE]
    assert reads == ["reviewer", "coder"]


async def test_a_live_frame_whose_agent_read_meets_an_outage_waits_for_the_catch_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool's connections lost while the bus's listener is not (a pooler restarted):
    the read a live frame waits for raises ``DatabaseUnavailable``, which ended the
    response with "Exception in ASGI application". The frame, not judged, is not sent; the
    stream stays open, and the catch-up sends it once the database answers."""
    catch_ups = iter([("reviewer", []), ("reviewer", [{**USAGE, "id": 7}])])

    async def fetch(pool: Any, **kwargs: Any) -> Any:
        return next(catch_ups)

    async def agent(*args: Any, **kwargs: Any) -> str:
        raise DatabaseUnavailable("the database connection was lost under a request")

    monkeypatch.setattr(events.store, "fetch_session_events_after", fetch)
    monkeypatch.setattr(events.sessions, "fetchval_agent", agent)
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", 0.01)
    live = (BusEvent("context.usage", {}, 7), BusEvent("session.message.delta.appended", {}))
    request = _Request()
    stream = events._stream(request, None, _Bus(live), ("t", "s", datetime.now(UTC)), 0)  # type: ignore[arg-type]
    frames = []
    async for frame in stream:
        frames.append(frame)
        request.gone = frame is not events.LIVE
    assert frames == [events.LIVE, {"event": "context.usage", "data": "{}", "id": "7"}]
