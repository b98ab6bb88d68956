"""The streams open on one session share its catch-up reads: one read of the table per
interval (per replica) whose rows go to every stream on the session, and one read for a
live event heard in the streams' first seconds, not one per stream. Streams of another
tenant on the same session id, or of a session made again under the id, never share
those rows."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.api import catch_up, event_cursor, events
from proxy.bus import RELISTENED, BusEvent
from proxy.config import Config
from proxy.stopping import StopClock
from proxy.store.db import DatabaseUnavailable

STREAMS = 200
ROUNDS = 10
INTERVAL = 0.02


class _Bus:
    """Hands each stream a queue; ``live`` puts an event in every one of them."""

    def __init__(self) -> None:
        self.queues: list[asyncio.Queue[Any]] = []

    @contextlib.asynccontextmanager
    async def subscribe(self, tenant: str, session_id: str) -> AsyncIterator[asyncio.Queue[Any]]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self.queues.append(queue)
        yield queue

    def live(self, event: BusEvent) -> None:
        for queue in self.queues:
            queue.put_nowait(event)


class _Request:
    scope: dict[str, Any] = {}  # pass-through: no key to revoke
    state = SimpleNamespace(config=SimpleNamespace(current=Config()), stop=StopClock())
    gone = False

    async def is_disconnected(self) -> bool:
        return _Request.gone


class _Table:
    """The events table as the catch-up reads it, each tenant's rows apart; counts reads."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, datetime], list[dict[str, Any]]] = {}
        self.reads = 0

    async def fetch(self, pool: Any, **kw: Any) -> Any:
        self.reads += 1
        await asyncio.sleep(0)  # a statement takes a round trip
        rows = self.rows.get((kw["tenant"], kw["created_at"]), [])
        return "default", [r for r in rows if r["id"] > kw["after_id"]]

    def add(self, tenant: str, created_at: datetime, event_id: int) -> None:
        data = {"tenant": tenant}
        row = {"id": event_id, "name": "context.usage", "data": data, "settled": True}
        self.rows.setdefault((tenant, created_at), []).append(row)


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> _Table:
    table = _Table()
    monkeypatch.setattr(events.store, "fetch_session_events_after", table.fetch)
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", INTERVAL)
    _Request.gone = False
    return table


async def _collect(bus: _Bus, session: tuple[str, str, datetime], out: list[Any]) -> None:
    async for frame in events._stream(_Request(), None, bus, session, 0):  # type: ignore[arg-type]
        out.append(frame)


async def _open(n: int, bus: _Bus, session: tuple[str, str, datetime]) -> tuple[list, list]:
    frames: list[list[Any]] = [[] for _ in range(n)]
    tasks = [asyncio.create_task(_collect(bus, session, f)) for f in frames]
    while sum(events.LIVE in f for f in frames) < n:  # every replay done
        await asyncio.sleep(0.001)
    return tasks, frames


def _holds(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The ids the streams hold back from now on, one entry per hold (``Cursor.hold``)."""
    held: list[int | None] = []
    hold = event_cursor.Cursor.hold

    def noted(cursor: event_cursor.Cursor, event_id: int | None) -> None:
        held.append(event_id)
        hold(cursor, event_id)

    monkeypatch.setattr(event_cursor.Cursor, "hold", noted)
    return held


async def _close(tasks: list[asyncio.Task[None]]) -> None:
    _Request.gone = True
    await asyncio.wait_for(asyncio.gather(*tasks), 5)


async def test_streams_on_one_session_share_each_periodic_read(table: _Table) -> None:
    bus, session = _Bus(), ("t", "s", datetime.now(UTC))
    tasks, frames = await _open(STREAMS, bus, session)
    replays, table.reads = table.reads, 0
    table.add("t", session[2], 1)  # never announced: only the catch-up finds it
    await asyncio.sleep(INTERVAL * ROUNDS)
    await _close(tasks)
    assert replays == STREAMS  # each stream replays from its own Last-Event-ID
    assert table.reads <= ROUNDS + 2, table.reads  # one read per interval, not per stream
    for f in frames:
        assert [x.get("id") for x in f if x is not events.LIVE] == ["1"]


async def test_a_live_event_in_the_first_seconds_costs_one_read(table: _Table) -> None:
    bus, session = _Bus(), ("t", "s", datetime.now(UTC))
    tasks, frames = await _open(STREAMS, bus, session)
    table.reads = 0
    table.add("t", session[2], 1)  # committed, its announcement missed
    table.add("t", session[2], 2)
    bus.live(BusEvent("context.usage", {"tenant": "t"}, 2))
    while sum(len(f) for f in frames) < STREAMS * 3:
        await asyncio.sleep(0.001)
    reads = table.reads
    await _close(tasks)
    assert reads <= 2, reads
    for f in frames:
        assert [x.get("id") for x in f if x is not events.LIVE] == ["1", "2"]


async def test_streams_of_other_tenants_or_sessions_never_share_rows(table: _Table) -> None:
    now = datetime.now(UTC)
    sessions = [("t1", "s", now), ("t2", "s", now), ("t1", "s", now + timedelta(seconds=1))]
    opened = [await _open(3, _Bus(), s) for s in sessions]
    for i, (tenant, _, created_at) in enumerate(sessions):
        table.add(tenant, created_at, 10 + i)
    await asyncio.sleep(INTERVAL * 4)
    await _close([t for tasks, _ in opened for t in tasks])
    for i, (_, frames) in enumerate(opened):
        for f in frames:
            assert [x.get("id") for x in f if x is not events.LIVE] == [str(10 + i)]


async def test_streams_at_different_ids_each_get_only_what_they_lack(table: _Table) -> None:
    bus, session = _Bus(), ("t", "s", datetime.now(UTC))
    for i in (1, 2, 3):
        table.add("t", session[2], i)
    frames: list[list[Any]] = [[], []]
    pairs = zip((0, 2), frames, strict=True)
    tasks = [asyncio.create_task(_collect_after(bus, session, a, f)) for a, f in pairs]
    await asyncio.sleep(INTERVAL * 2)
    table.add("t", session[2], 4)
    await asyncio.sleep(INTERVAL * 4)
    await _close(tasks)
    assert [x.get("id") for x in frames[0] if x is not events.LIVE] == ["1", "2", "3", "4"]
    assert [x.get("id") for x in frames[1] if x is not events.LIVE] == ["3", "4"]


async def _collect_after(
    bus: _Bus, session: tuple[str, str, datetime], after: int, out: list[Any]
) -> None:
    async for frame in events._stream(_Request(), None, bus, session, after):  # type: ignore[arg-type]
        out.append(frame)


class _Mark:
    def __init__(self, mark: int) -> None:
        self.mark = mark


async def test_a_stream_that_stopped_asking_no_longer_holds_the_reads_back(
    table: _Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream whose client reads nothing waits in a send and asks for no read: its mark,
    # left behind, had every read of the session's other streams start from it.
    afters: list[int] = []

    async def fetch(pool: Any, **kw: Any) -> Any:
        afters.append(kw["after_id"])
        return await table.fetch(pool, **kw)

    monkeypatch.setattr(events.store, "fetch_session_events_after", fetch)
    monkeypatch.setattr(catch_up, "STALLED", INTERVAL)
    stalled, reading, now = _Mark(0), _Mark(100), datetime.now(UTC)
    with (
        catch_up.sharing(None, "t", "s", now, stalled) as reads,
        catch_up.sharing(None, "t", "s", now, reading),
    ):
        await reads.read(stalled, 10.0, since=0.0)  # from the lowest mark
        await asyncio.sleep(INTERVAL * 2)
        await reads.read(reading, 10.0, since=asyncio.get_running_loop().time())
    assert afters == [0, 100]


async def test_a_live_event_whose_read_finds_no_session_costs_one_read_not_one_each(
    table: _Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read that holds no row of the live event (the session deleted meanwhile, or the read
    # failed) fitted no stream waiting on it: each started one of its own, one after another.
    bus, session = _Bus(), ("t", "s", datetime.now(UTC))
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", 60.0)  # no periodic read meanwhile
    tasks, frames = await _open(STREAMS, bus, session)
    table.reads = 0

    async def deleted(pool: Any, **kw: Any) -> Any:
        table.reads += 1
        await asyncio.sleep(0)
        return None

    monkeypatch.setattr(events.store, "fetch_session_events_after", deleted)
    bus.live(BusEvent("context.usage", {"tenant": "t"}, 1))
    await asyncio.wait_for(asyncio.gather(*tasks), 5)  # each stream finds its session gone
    assert table.reads <= 2, table.reads
    assert all(f == [events.LIVE] for f in frames)


async def test_a_live_event_whose_read_fails_costs_one_read_not_one_each(
    table: _Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus, session = _Bus(), ("t", "s", datetime.now(UTC))
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", 60.0)  # no periodic read meanwhile
    tasks, frames = await _open(STREAMS, bus, session)
    table.reads = 0

    async def outage(pool: Any, **kw: Any) -> Any:
        table.reads += 1
        await asyncio.sleep(0)
        raise DatabaseUnavailable("the database is down")

    monkeypatch.setattr(events.store, "fetch_session_events_after", outage)
    held = _holds(monkeypatch)
    bus.live(BusEvent("context.usage", {"tenant": "t"}, 1))
    deadline = asyncio.get_running_loop().time() + 20  # bounds a hang, not the machine's pace
    while held != [1] * STREAMS:  # each stream holds the event back for a catch-up
        assert asyncio.get_running_loop().time() < deadline, held
        await asyncio.sleep(0.001)
    assert table.reads <= 2, table.reads
    table.reads = 0
    bus.live(RELISTENED)  # which ends each stream, after one more read, shared too
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert table.reads <= 2, table.reads
    ends = [{"comment": "reconnect", "retry": f[1]["retry"], "id": "0"} for f in frames]
    assert [f[1:] for f in frames] == [[end] for end in ends]  # resumed below the held one
    assert len({f[1]["retry"] for f in frames}) > STREAMS // 2  # apart, not all one time


async def test_streams_past_a_failed_read_share_the_read_again(
    table: _Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read that failed for a reason other than an outage fails the streams it started from
    # (``tests/integration/api/test_events_shared_read_failure.py``); the ones further on
    # read again together, one read, not one each.
    afters: list[int] = []

    async def fetch(pool: Any, **kw: Any) -> Any:
        afters.append(kw["after_id"])
        if kw["after_id"] == 0:
            raise ValueError("a statement error")
        return await table.fetch(pool, **kw)

    monkeypatch.setattr(events.store, "fetch_session_events_after", fetch)
    low, now = _Mark(0), datetime.now(UTC)
    further = [_Mark(100) for _ in range(STREAMS)]
    with contextlib.ExitStack() as stack:
        reads = stack.enter_context(catch_up.sharing(None, "t", "s", now, low))
        for mark in further:
            stack.enter_context(catch_up.sharing(None, "t", "s", now, mark))
        since = asyncio.get_running_loop().time()
        got = await asyncio.gather(
            *(reads.read(m, 10.0, since=since) for m in [low, *further]), return_exceptions=True
        )
    assert isinstance(got[0], ValueError)
    assert not any(isinstance(g, BaseException) for g in got[1:])
    assert afters == [0, 100]


async def test_reads_failing_at_every_mark_below_a_stream_end_after_one_read_each(
    table: _Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each failed read moves the next one's start above the mark it started from, so a
    # stream past marks whose reads always fail gets its rows after one read per such mark,
    # and the streams at them their failure, each once: no read is tried twice.
    afters: list[int] = []

    async def fetch(pool: Any, **kw: Any) -> Any:
        afters.append(kw["after_id"])
        await asyncio.sleep(0)
        if kw["after_id"] < 100:
            raise ValueError(f"a statement error past {kw['after_id']}")
        return await table.fetch(pool, **kw)

    monkeypatch.setattr(events.store, "fetch_session_events_after", fetch)
    marks, now = [_Mark(m) for m in (0, 10, 50, 100)], datetime.now(UTC)
    with contextlib.ExitStack() as stack:
        for mark in marks:
            reads = stack.enter_context(catch_up.sharing(None, "t", "s", now, mark))
        since = asyncio.get_running_loop().time()
        got = await asyncio.wait_for(
            asyncio.gather(
                *(reads.read(m, 10.0, since=since) for m in marks), return_exceptions=True
            ),
            5,
        )
    assert [type(g) for g in got[:3]] == [ValueError] * 3 and got[3] == [("default", [])]
    assert afters == [0, 10, 50, 100]
