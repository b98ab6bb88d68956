"""Many streams open on one session cost the database one catch-up read per interval,
counted through the pool: the session's streams share it (``api/catch_up.py``), and each
still gets the event only that read finds."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from proxy.api import events
from proxy.store import events as store
from proxy.store.db import GuardedConnection
from tests.integration.api.quiet_streams import LeavingRequest, QuietBus

STREAMS = 200
INTERVAL = 0.05
ROUNDS = 10


async def test_streams_on_one_session_cost_one_catch_up_read_per_interval(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", INTERVAL)
    created_at = await pool.fetchval(
        "INSERT INTO sessions (tenant, id) VALUES ('t', 'shared') RETURNING created_at"
    )
    reads: list[str] = []
    fetch = GuardedConnection.fetch

    async def counted(self: GuardedConnection, query: str, *args: object, **kw: Any) -> Any:
        if query == store.FETCH_SESSION_EVENTS_AFTER:
            reads.append(query)
        return await fetch(self, query, *args, **kw)

    monkeypatch.setattr(GuardedConnection, "fetch", counted)
    frames: list[list[Any]] = [[] for _ in range(STREAMS)]

    client = LeavingRequest()

    async def stream(out: list[Any]) -> None:
        session = ("t", "shared", created_at)
        async for frame in events._stream(client, pool, QuietBus(), session, 0):  # type: ignore[arg-type]
            out.append(frame)

    tasks = [asyncio.create_task(stream(f)) for f in frames]
    while sum(events.LIVE in f for f in frames) < STREAMS:  # every replay done
        await asyncio.sleep(0.001)
    reads.clear()
    await pool.execute(
        "INSERT INTO events (tenant, session_id, name, data) VALUES ('t', 'shared', 'x', '{}')"
    )
    await asyncio.sleep(INTERVAL * ROUNDS)
    client.gone = True
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert len(reads) <= ROUNDS + 2, len(reads)  # one per interval, not one per stream
    assert all([x.get("event") for x in f[1:]] == ["x"] for f in frames)
