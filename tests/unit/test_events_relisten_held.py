"""A stream ended for a new listener (``bus.RELISTENED``) while it holds back an event it
heard live (its read met an outage) after sending a later one: its client's Last-Event-ID,
the last id it received, is past the held event, so the stream's last frames send it, or
(the database still gone) name an id below it to resume after (``reconnect.last_frames``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from proxy.api import catch_up, event_cursor, events
from proxy.bus import RELISTENED, BusEvent
from proxy.store.db import DatabaseUnavailable
from tests.unit.test_events_shared_catch_up import _Bus, _holds, _open, _Request, _Table


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> _Table:
    table = _Table()
    monkeypatch.setattr(events.store, "fetch_session_events_after", table.fetch)
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", 60.0)  # no periodic read meanwhile
    monkeypatch.setattr(event_cursor, "SETTLE_SECONDS", 0.05)  # the first seconds, short
    _Request.gone = False
    return table


def _resume(frames: list[dict[str, Any]]) -> int:
    """The highest id an ``EventSource``'s Last-Event-ID names once the stream ended, the
    last id it received: an event's, or a resume token's (its mark, then each id above it
    less the mark)."""
    ids = [f["id"] for f in frames if "id" in f]
    if not ids:
        return 0
    mark, *above = (int(part) for part in ids[-1].split("."))
    return mark + max(above, default=0)


async def _held_then_later_sent(
    table: _Table, monkeypatch: pytest.MonkeyPatch
) -> tuple[_Bus, tuple[str, str, datetime], list[Any], list[list[dict[str, Any]]]]:
    """Two streams that sent event 2, then held back event 1, committed after it (two
    writers) and heard in their first seconds, whose read met an outage."""
    monkeypatch.setattr(event_cursor, "SETTLE_SECONDS", 5.0)
    held = _holds(monkeypatch)
    # the end's read is one of its own: none that failed in the outage is shared with it
    monkeypatch.setattr(catch_up, "SLACK", 0.0)
    bus, session = _Bus(), ("t", "s", datetime.now(UTC))
    tasks, frames = await _open(2, bus, session)
    fetch, down = table.fetch, False

    async def outage(pool: Any, **kw: Any) -> Any:
        if down:
            raise DatabaseUnavailable("the database is down")
        return await fetch(pool, **kw)

    monkeypatch.setattr(events.store, "fetch_session_events_after", outage)

    def add(event_id: int) -> None:  # unsettled: within the seconds an earlier id may come
        table.add("t", session[2], event_id)
        rows = table.rows[("t", session[2])]
        rows.sort(key=lambda r: r["id"])
        rows[-1]["settled"] = rows[0]["settled"] = False

    add(2)
    bus.live(BusEvent("context.usage", {"tenant": "t"}, 2))
    while not all(_resume(f) == 2 for f in frames):
        await asyncio.sleep(0.001)
    down = True
    add(1)
    bus.live(BusEvent("context.usage", {"tenant": "t"}, 1))  # held back: its read fails
    await _until(lambda: held == [1, 1])  # by each stream
    down = False
    return bus, session, tasks, frames


async def test_an_event_held_back_is_sent_before_the_stream_ends_for_a_new_listener(
    table: _Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus, _, tasks, frames = await _held_then_later_sent(table, monkeypatch)
    bus.live(RELISTENED)
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    for f in frames:
        got = [int(x["id"]) for x in f if "data" in x]
        replayed = [r["id"] for rows in table.rows.values() for r in rows if r["id"] > _resume(f)]
        assert sorted(got + replayed) == [1, 2], (f, replayed)  # each once
        assert "retry" in f[-1]


async def test_one_the_database_still_cannot_send_is_resumed_below(
    table: _Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus, _, tasks, frames = await _held_then_later_sent(table, monkeypatch)

    async def outage(pool: Any, **kw: Any) -> Any:
        raise DatabaseUnavailable("the database is down again")

    monkeypatch.setattr(events.store, "fetch_session_events_after", outage)
    bus.live(RELISTENED)
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    for f in frames:
        assert "retry" in f[-1] and _resume(f) == 0, f  # the replay sends 1 (and 2 again)
        assert [x.get("id") for x in f[1:-1] if "data" in x] == ["2"]


async def test_a_later_event_waits_behind_one_held_back_so_no_end_skips_it(
    table: _Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sent before the held one, a later event's id would be the Last-Event-ID of a client
    # whose stream ends any other way (its network, a stop), and its replay would skip it.
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", 0.05)
    monkeypatch.setattr(event_cursor, "SETTLE_SECONDS", 60.0)  # ended below, once 1 is held
    lives = _lives(monkeypatch)
    held = _holds(monkeypatch)
    bus, session = _Bus(), ("t", "s", datetime.now(UTC))
    tasks, (frames,) = await _open(1, bus, session)
    fetch, down = table.fetch, True

    async def outage(pool: Any, **kw: Any) -> Any:
        if down:
            raise DatabaseUnavailable("the database is down")
        return await fetch(pool, **kw)

    monkeypatch.setattr(events.store, "fetch_session_events_after", outage)
    table.add("t", session[2], 1)
    bus.live(BusEvent("context.usage", {"tenant": "t"}, 1))  # held back: its read failed
    await _until(lambda: held == [1])
    (live,) = lives
    live.unsure_until = 0.0  # past the first seconds: a live event goes without a read
    table.add("t", session[2], 2)
    bus.live(BusEvent("context.usage", {"tenant": "t"}, 2))
    await _until(lambda: held == [1, 2] or _resume(frames) != 0)  # held back, or sent
    assert _resume(frames) == 0, frames  # the later one waits too
    down = False
    while _resume(frames) != 2:  # the catch-up once the database is back: both, in order
        await asyncio.sleep(0.005)
    bus.live(RELISTENED)
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert [x["id"] for x in frames if "id" in x] == ["1", "2"]


async def _until(state: Callable[[], bool]) -> None:
    """Wait for ``state``, on a loaded machine too, but not for ever."""
    async with asyncio.timeout(5):
        while not state():
            await asyncio.sleep(0.001)


def _lives(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The streams' live judges (``events._Live``) made from now on."""
    lives: list[Any] = []

    class Noted(events._Live):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            lives.append(self)

    monkeypatch.setattr(events, "_Live", Noted)
    return lives
