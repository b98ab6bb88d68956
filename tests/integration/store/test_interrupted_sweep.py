"""The start-up sweep of compactions a stopped process left, when the database is not there
as the proxy starts.

A compaction's own look closes only the session's latest started event (every compaction
before it closed those older), so what an older version left, two started events in a row
without partners, is the sweep's alone to close: a start that finds no database tries again
in the background instead of leaving it to a next start.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest

from proxy import requestlog
from proxy.metrics import Metrics
from proxy.observe import Observer, RequestObs
from proxy.services import interrupted
from proxy.store import events, leases, summaries
from proxy.store.db import DatabaseUnavailable
from tests.integration.store.helpers import create_session

T = "t-sweep"
STARTED, COMPLETED = "context.compaction.started", "context.compaction.completed"
FAILED = "context.compaction.failed"


class _Bus:
    async def publish(
        self, conn: Any, *, tenant: str, session_id: str, name: str, data: Any
    ) -> None:
        await events.insert_event(conn, tenant=tenant, session_id=session_id, name=name, data=data)


async def _left_by_an_older_version(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await create_session(conn, tenant=T, session_id="s", agent="default", model="m")
        for name, n in ((STARTED, 0), (STARTED, 1), (COMPLETED, 1), (STARTED, 2)):
            await events.insert_event(conn, tenant=T, session_id="s", name=name, data={"n": n})


async def _unpaired(pool: asyncpg.Pool, every: bool) -> int:
    async with pool.acquire() as conn:
        rows = await events.fetch_unpaired_compactions(conn, tenant=T, session_id="s", every=every)
    return len(rows)


def _refusing(monkeypatch: pytest.MonkeyPatch, *errors: BaseException) -> None:
    """The sweep's lookup of sessions raises ``errors`` on its first calls, one each, then
    reads the database."""
    real, left = events.fetch_sessions_with_unpaired_compactions, list(errors)

    async def refused_at_first(conn: Any) -> list[tuple[str, str]]:
        if left:
            raise left.pop(0)
        return await real(conn)

    monkeypatch.setattr(events, "fetch_sessions_with_unpaired_compactions", refused_at_first)


async def _swept_after_start(pool: asyncpg.Pool) -> None:
    """A start closes nothing now, and its background sweep closes every unpaired event."""
    leases: Any = SimpleNamespace(ttl=0.3)
    closer = interrupted.Closer(pool, _Bus(), leases, acquire_timeout=1.0)  # type: ignore[arg-type]
    try:
        assert await closer.at_start() == 0
        for _ in range(40):
            if await _unpaired(pool, every=True) == 0:
                break
            await asyncio.sleep(0.05)
        assert await _unpaired(pool, every=True) == 0
    finally:
        await closer.aclose()


async def test_a_compactions_look_closes_the_latest_only(pool: asyncpg.Pool) -> None:
    await _left_by_an_older_version(pool)
    assert await _unpaired(pool, every=True) == 2
    assert await _unpaired(pool, every=False) == 1


async def test_a_start_without_its_database_sweeps_again_once_it_is_there(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _left_by_an_older_version(pool)
    _refusing(monkeypatch, DatabaseUnavailable("connection refused"))
    await _swept_after_start(pool)


async def test_a_compaction_whose_claim_passed_writes_no_started_event(
    pool: asyncpg.Pool,
) -> None:
    """A compaction whose lease expired, and whose session another compaction claimed,
    writes no started event: written after the other's, it would be the older of two
    unpaired in a row, which no compaction's look reads."""
    first, second = uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn:
        await create_session(conn, tenant=T, session_id="s", agent="default", model="m")
        key = {"tenant": T, "session_id": "s"}
        assert await leases.claim_compaction(conn, **key, owner=first, ttl=0.05)
        await asyncio.sleep(0.1)  # the first one stalls past its lease
        assert await leases.claim_compaction(conn, **key, owner=second, ttl=30)
        assert await events.insert_claimed_event(
            conn, **key, owner=second, name=STARTED, data={"n": 2}
        )
        assert (
            await events.insert_claimed_event(conn, **key, owner=first, name=STARTED, data={})
            is None
        )
        await events.insert_event(conn, **key, name=COMPLETED, data={"n": 2})
    assert await _unpaired(pool, every=True) == 0


async def test_the_background_sweep_outlives_a_refused_statement(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A pass the database refuses (a standby promoted late is read-only for a while) is
    logged and tried again, as a pass without a database is: the task does not end there,
    its error unseen until the stop."""
    await _left_by_an_older_version(pool)
    _refusing(
        monkeypatch,
        DatabaseUnavailable("connection refused"),
        asyncpg.ReadOnlySQLTransactionError("cannot execute in a read-only transaction"),
    )
    await _swept_after_start(pool)
    assert "read-only" in caplog.text


async def test_a_start_whose_sweep_is_refused_sweeps_in_the_background(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A statement the database refuses as the proxy starts (a cancelled statement) is no
    failed start: the sweep goes on in the background, as when the database is not there."""
    await _left_by_an_older_version(pool)
    _refusing(
        monkeypatch, asyncpg.QueryCanceledError("canceling statement due to statement timeout")
    )
    await _swept_after_start(pool)
    assert "statement timeout" in caplog.text


async def test_a_compaction_cut_after_its_summary_is_stored_is_closed_completed(
    pool: asyncpg.Pool,
) -> None:
    """A stop (or a kill) between the summary's insert and its completed event: the summary
    is there, in use, so its started event is closed as completed, not interrupted. An
    earlier one of the same span that stored nothing is still interrupted: a summary
    stored after the next started event is that one's."""
    span = {"trigger": "soft", "from_pos": 0, "to_pos": 8, "tokens_before": 3000}
    data = {**span, "summary_version": None}
    async with pool.acquire() as conn:
        await create_session(conn, tenant=T, session_id="s", agent="default", model="m")
        key = {"tenant": T, "session_id": "s"}
        cut_early = await events.insert_event(conn, **key, name=STARTED, data=data)
        cut_late = await events.insert_event(conn, **key, name=STARTED, data=data)
        stored = await summaries.insert_summary(
            conn, **key, boundary=8, boundary_hash=None, content="b", tokens=1, model="f"
        )
        closer = interrupted.Closer(pool, _Bus(), SimpleNamespace(ttl=1), 1.0)  # type: ignore[arg-type]
        assert await closer.close_session(conn, T, "s", every=True) == 2
        rows = await conn.fetch(
            "SELECT name, data::text AS data FROM events"
            " WHERE session_id = 's' AND id > $1 ORDER BY id",
            cut_late,
        )
    closed = {json.loads(r["data"])["started_id"]: (r["name"], json.loads(r["data"])) for r in rows}
    assert closed[cut_early][0] == FAILED and closed[cut_early][1]["reason"] == "interrupted"
    name, done = closed[cut_late]
    assert name == COMPLETED and done["summary_version"] == stored == 1
    assert {k: done[k] for k in span} == span
    assert done["tokens_after"] is None and done["duration_ms"] >= 0
    assert await _unpaired(pool, every=True) == 0


async def test_a_summary_stored_after_an_invalidated_one_is_found(pool: asyncpg.Pool) -> None:
    """Versions count invalidated summaries too (an edit below a summary's boundary leaves
    its version taken), so the summary a compaction stored can be past the one it read by
    more than one: it is still that compaction's, and the cut compaction completed."""
    key = {"tenant": T, "session_id": "s"}
    store = {"boundary_hash": None, "content": "b", "tokens": 1, "model": "f"}
    async with pool.acquire() as conn:
        await create_session(conn, **key, agent="default", model="m")
        assert await summaries.insert_summary(conn, **key, boundary=4, **store) == 1
        assert await summaries.insert_summary(conn, **key, boundary=8, **store) == 2
        await summaries.invalidate_after(conn, **key, pos=6)  # an edit at 6: v1 is the latest
        data = {"trigger": "soft", "from_pos": 4, "to_pos": 7, "tokens_before": 3000}
        cut = await events.insert_event(
            conn, **key, name=STARTED, data={**data, "summary_version": 1}
        )
        assert await summaries.insert_summary(conn, **key, boundary=7, **store) == 3
        closer = interrupted.Closer(pool, _Bus(), SimpleNamespace(ttl=1), 1.0)  # type: ignore[arg-type]
        assert await closer.close_session(conn, T, "s") == 1
        row = await conn.fetchrow(
            "SELECT name, data::text AS data FROM events WHERE session_id = 's' AND id > $1",
            cut,
        )
    assert row["name"] == COMPLETED
    assert json.loads(row["data"])["summary_version"] == 3


async def test_a_swept_compaction_counts_but_is_not_the_running_ones_result(
    pool: asyncpg.Pool,
) -> None:
    """The next compaction's look closes a cut one inside its own request and span: the
    closed one's result counts in /metrics, but it is not the running compaction's (which
    may fold nothing and write no event of its own), so the request says none."""
    key = {"tenant": T, "session_id": "s"}
    data = {"trigger": "soft", "from_pos": 0, "to_pos": 8, "tokens_before": 3000}
    metrics = Metrics()
    record = requestlog.RequestRecord("r1")
    record.obs = obs = RequestObs(Observer(metrics), None)
    token = requestlog.begin(record)
    try:
        async with pool.acquire() as conn:
            await create_session(conn, **key, agent="default", model="m")
            await events.insert_event(conn, **key, name=STARTED, data=data)
            await summaries.insert_summary(
                conn, **key, boundary=8, boundary_hash=None, content="b", tokens=1, model="f"
            )
            closer = interrupted.Closer(pool, _Bus(), SimpleNamespace(ttl=1), 1.0)  # type: ignore[arg-type]
            assert await closer.close_session(conn, T, "s") == 1
    finally:
        requestlog.end(token)
    assert obs.compaction is None
    assert b'cascade_compactions_total{result="completed"} 1.0' in metrics.render()


async def test_a_partner_the_sweep_wrote_for_an_older_started_event_pairs_no_later_one(
    pool: asyncpg.Pool,
) -> None:
    """A pass that closed the first of two started events in a row and lost its database
    before the second: the first's partner (``started_id`` naming it) comes after the
    second, and pairs it by position alone, so the second was never closed."""
    key = {"tenant": T, "session_id": "s"}
    async with pool.acquire() as conn:
        await create_session(conn, **key, agent="default", model="m")
        first = await events.insert_event(conn, **key, name=STARTED, data={"n": 0})
        second = await events.insert_event(conn, **key, name=STARTED, data={"n": 1})
        partner = {"reason": "interrupted", "started_id": first}
        await events.insert_event(conn, **key, name=FAILED, data=partner)
        every = await events.fetch_unpaired_compactions(conn, **key, every=True)
        latest = await events.fetch_unpaired_compactions(conn, **key)
    assert [r["id"] for r in every] == [second]
    assert [r["id"] for r in latest] == [second]


async def test_the_sweep_pairs_as_the_look_does(pool: asyncpg.Pool) -> None:
    """The sweep's one pass pairs each started event by a partner naming it, else by a
    partner naming none (rows an older version wrote, without ``started_id``), the nearest
    after it that no later started event still open took; a partner naming one pairs no
    other. The third started event's partner is the one after the sixth: the sixth and
    the fifth are named."""
    key = {"tenant": T, "session_id": "s"}
    async with pool.acquire() as conn:
        await create_session(conn, **key, agent="default", model="m")
        ids: list[int] = []
        for name, named in [
            (STARTED, None), (COMPLETED, None), (STARTED, None), (STARTED, None),
            (FAILED, 2), (STARTED, None), (STARTED, None), (FAILED, None),
            (COMPLETED, 6), (STARTED, None), (FAILED, 5), (STARTED, None),
        ]:  # fmt: skip
            data = {} if named is None else {"started_id": ids[named]}
            ids.append(await events.insert_event(conn, **key, name=name, data=data))
        every = await events.fetch_unpaired_compactions(conn, **key, every=True)
        latest = await events.fetch_unpaired_compactions(conn, **key)
        sessions = await events.fetch_sessions_with_unpaired_compactions(conn)
    assert [r["id"] for r in every] == [ids[9], ids[11]]
    assert [r["id"] for r in latest] == [ids[11]]
    assert sessions == [(T, "s")]


async def test_a_started_event_with_a_malformed_span_is_closed_not_refused(
    pool: asyncpg.Pool,
) -> None:
    """A started event whose ``to_pos`` is no integer (written by hand, or by another
    writer than this release) is closed as interrupted: the look for the summary it stored
    reads the value as text, so the cast error of one event does not stop every pass."""
    key = {"tenant": T, "session_id": "s"}
    async with pool.acquire() as conn:
        await create_session(conn, **key, agent="default", model="m")
        for to_pos in ("x", 8.5):
            await events.insert_event(conn, **key, name=STARTED, data={"to_pos": to_pos})
        await summaries.insert_summary(
            conn, **key, boundary=4, boundary_hash=None, content="b", tokens=1, model="f"
        )
        closer = interrupted.Closer(pool, _Bus(), SimpleNamespace(ttl=1), 1.0)  # type: ignore[arg-type]
        assert await closer.close_session(conn, T, "s", every=True) == 2
    assert await _unpaired(pool, every=True) == 0


async def test_the_sweep_keeps_a_sessions_backoff(pool: asyncpg.Pool) -> None:
    """A session backing off after a failed compaction, with a started event a stop left:
    the sweep closes the event and hands the claim back with the backoff as it was, so a
    restart does not start the session's background compactions again at once."""
    key = {"tenant": T, "session_id": "s"}
    async with pool.acquire() as conn:
        await create_session(conn, **key, agent="default", model="m")
        failed = uuid.uuid4()
        assert await leases.claim_compaction(conn, **key, owner=failed, ttl=30)
        await leases.release_compaction(conn, **key, owner=failed, backoff=60)
        await events.insert_event(conn, **key, name=STARTED, data={"n": 0})
    closer = interrupted.Closer(pool, _Bus(), SimpleNamespace(ttl=1), 1.0)  # type: ignore[arg-type]
    try:
        assert await closer.at_start() == 1
    finally:
        await closer.aclose()
    assert await _unpaired(pool, every=True) == 0
    async with pool.acquire() as conn:
        background = await leases.claim_compaction(
            conn, **key, owner=uuid.uuid4(), ttl=30, background=True
        )
        left = await conn.fetchval(
            "SELECT compaction_expires - clock_timestamp() > interval '50 seconds'"
            " FROM sessions WHERE tenant = $1 AND id = $2",
            T,
            "s",
        )
    assert background is None and left
