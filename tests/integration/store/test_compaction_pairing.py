"""The pairing of compaction events against a reference in Python, on random sequences.

The rule (docs/events.md): a partner naming a started event (``started_id``) pairs that one
only; a partner naming none pairs the nearest earlier started event of its session that is
still unpaired. Sequences mix two sessions, partners with and without ``started_id``, and
``started_id``s that are null, name nothing, name another session's event, a later one or a
partner, or are malformed as an older version could write them (a number, text, no digits).
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from hypothesis import HealthCheck, given, settings, strategies as st

from proxy.store import events
from tests.integration.store.helpers import create_session

T = "t-pair"
SESSIONS = ("a", "b")
STARTED = "context.compaction.started"
KINDS = (STARTED, "context.compaction.completed", "context.compaction.failed")
BASE = 1000  # the first event's id: ids are given, so a started_id can name one
MISSING = object()

_named = st.one_of(
    st.just(MISSING),
    st.none(),
    st.tuples(st.integers(0, 15), st.booleans()),  # the k-th event's id, as a number or as text
    st.sampled_from([10**9, "abc", "", "0"]),
)
_event = st.tuples(st.sampled_from(SESSIONS), st.sampled_from(KINDS), _named)
_sequences = st.lists(_event, max_size=16)


def _data(i: int, kind: str, named: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"n": i}
    if kind != STARTED and named is not MISSING:
        if isinstance(named, tuple):
            named = BASE + named[0] if named[1] else str(BASE + named[0])
        data["started_id"] = named
    return data


def reference(rows: list[tuple[int, str, str, dict[str, Any]]], session: str) -> list[int]:
    """The session's unpaired started events: those named are paired first, the rest by a
    stack, each partner naming none closing the latest started event still open."""
    own = [r for r in rows if r[1] == session]
    started = {i for i, _, kind, _ in own if kind == STARTED}
    named = {
        s
        for i, _, kind, data in own
        if kind != STARTED and data.get("started_id") is not None
        for s in started
        if s < i and str(data["started_id"]) == str(s)
    }
    open_: list[int] = []
    paired = set(named)
    for i, _, kind, data in own:
        if kind == STARTED and i not in named:
            open_.append(i)
        elif kind != STARTED and data.get("started_id") is None and open_:
            paired.add(open_.pop())
    return sorted(started - paired)


async def _check(conn: asyncpg.Connection, sequence: list[Any]) -> None:
    rows = [(BASE + i, s, kind, _data(i, kind, n)) for i, (s, kind, n) in enumerate(sequence)]
    await conn.execute("DELETE FROM events")
    await conn.executemany(
        "INSERT INTO events (id, tenant, session_id, name, data) VALUES ($1, $2, $3, $4, $5)",
        [(i, T, s, kind, d) for i, s, kind, d in rows],
    )
    left = set(await events.fetch_sessions_with_unpaired_compactions(conn))
    for session in SESSIONS:
        want = reference(rows, session)
        every = await events.fetch_unpaired_compactions(
            conn, tenant=T, session_id=session, every=True
        )
        assert [r["id"] for r in every] == want, (session, rows)
        look = await events.fetch_unpaired_compactions(conn, tenant=T, session_id=session)
        latest = max((i for i, s, k, _ in rows if s == session and k == STARTED), default=None)
        assert [r["id"] for r in look] == [i for i in want if i == latest], (session, rows)
        assert ((T, session) in left) == bool(want), (session, rows)


async def test_the_sweep_and_the_look_pair_as_the_reference(pool: asyncpg.Pool) -> None:
    loop = asyncio.get_running_loop()
    async with pool.acquire() as conn:
        for session in SESSIONS:
            await create_session(conn, tenant=T, session_id=session, agent="default", model="m")

        @settings(
            max_examples=150,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(_sequences)
        def pairs_as_the_reference(sequence: list[Any]) -> None:
            asyncio.run_coroutine_threadsafe(_check(conn, sequence), loop).result()

        await asyncio.to_thread(pairs_as_the_reference)
