"""A shared catch-up read that fails for a reason other than an outage (a statement error)
ends only the streams whose mark it started from: a stream further on reads again from its
own mark and stays open, and still gets the events a catch-up finds (``catch_up.Reads``)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from proxy.api import events
from proxy.store import events as store
from proxy.store.db import GuardedConnection
from tests.integration.api.quiet_streams import LeavingRequest, QuietBus

INTERVAL = 0.05


async def test_a_failed_shared_read_ends_only_the_stream_it_started_from(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", INTERVAL)
    created_at = await pool.fetchval(
        "INSERT INTO sessions (tenant, id) VALUES ('t', 'fail') RETURNING created_at"
    )
    insert = "INSERT INTO events (tenant, session_id, name, data) VALUES ('t', 'fail', $1, '{}')"
    await pool.execute(insert, "a")
    last = await pool.fetchval(insert + " RETURNING id", "b")
    failing = False  # from the low stream's mark, the read errs in PostgreSQL
    fetch = GuardedConnection.fetch

    async def erring(self: GuardedConnection, query: str, *args: object, **kw: Any) -> Any:
        if failing and query == store.FETCH_SESSION_EVENTS_AFTER and args[2] == 0:
            query, args = "SELECT 1 / 0", ()
        return await fetch(self, query, *args, **kw)

    monkeypatch.setattr(GuardedConnection, "fetch", erring)
    session = ("t", "fail", created_at)
    low: list[Any] = []  # opened with no Last-Event-ID: its mark stays 0 (rows unsettled)
    high: list[Any] = []  # opened after the last event

    client = LeavingRequest()

    async def stream(out: list[Any], after: int) -> None:
        async for frame in events._stream(client, pool, QuietBus(), session, after):  # type: ignore[arg-type]
            out.append(frame)

    tasks = [asyncio.create_task(stream(low, 0)), asyncio.create_task(stream(high, last))]
    try:
        while not (events.LIVE in low and events.LIVE in high):
            await asyncio.sleep(0.005)
        failing = True
        await asyncio.sleep(INTERVAL * 3)
        assert tasks[0].done()
        with pytest.raises(asyncpg.DivisionByZeroError):
            tasks[0].result()  # the read from its own mark failed: it ends
        assert not tasks[1].done(), tasks[1]  # its read from its own mark did not
        new = await pool.fetchval(insert + " RETURNING id", "c")
        for _ in range(100):
            if any(f.get("id") == str(new) for f in high):
                break
            await asyncio.sleep(INTERVAL / 2)
        assert [f.get("event") for f in high] == [None, "c"]  # LIVE, then the new event
    finally:
        client.gone = True
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
