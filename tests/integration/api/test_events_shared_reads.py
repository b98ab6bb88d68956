"""Many streams open on one session cost the database one catch-up read per interval,
counted through the pool: the session's streams share it (``api/catch_up.py``), and each
still gets the event only that read finds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest

from proxy.api import events
from proxy.config import Config
from proxy.store import events as store
from proxy.store.db import GuardedConnection

STREAMS = 200
INTERVAL = 0.05
ROUNDS = 10


class _Bus:
    @contextlib.asynccontextmanager
    async def subscribe(self, tenant: str, session_id: str) -> AsyncIterator[asyncio.Queue[Any]]:
        yield asyncio.Queue()  # nothing announced: only the catch-up reads bring events


class _Request:
    scope: dict[str, Any] = {}  # pass-through
    state = SimpleNamespace(config=SimpleNamespace(current=Config()))
    gone = False

    async def is_disconnected(self) -> bool:
        return _Request.gone


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

    async def stream(out: list[Any]) -> None:
        session = ("t", "shared", created_at)
        async for frame in events._stream(_Request(), pool, _Bus(), session, 0):  # type: ignore[arg-type]
            out.append(frame)

    _Request.gone = False
    tasks = [asyncio.create_task(stream(f)) for f in frames]
    while sum(events.LIVE in f for f in frames) < STREAMS:  # every replay done
        await asyncio.sleep(0.001)
    reads.clear()
    await pool.execute(
        "INSERT INTO events (tenant, session_id, name, data) VALUES ('t', 'shared', 'x', '{}')"
    )
    await asyncio.sleep(INTERVAL * ROUNDS)
    _Request.gone = True
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert len(reads) <= ROUNDS + 2, len(reads)  # one per interval, not one per stream
    assert all([x.get("event") for x in f[1:]] == ["x"] for f in frames)
