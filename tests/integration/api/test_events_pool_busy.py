"""An open event stream whose catch-up finds every pooled connection held (the request's
``BoundedPool`` gives up after ``CASCADE_POOL_TIMEOUT_SECONDS``) stays open, as it does in
an outage, and reads what it missed at a later catch-up: the busy pool is the stream's
wait, not its end (an end with no last frame would be a broken response)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from proxy.api import events
from proxy.store.db import BoundedPool, create_pool
from tests.integration.api.quiet_streams import LeavingRequest, QuietBus

INTERVAL = 0.05


async def _until(check: Any, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


async def test_a_catch_up_on_a_busy_pool_keeps_the_stream_open(
    db_dsn: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", INTERVAL)
    created_at = await pool.fetchval(
        "INSERT INTO sessions (tenant, id) VALUES ('t', 'busy') RETURNING created_at"
    )
    insert = "INSERT INTO events (tenant, session_id, name, data) VALUES ('t', 'busy', $1, '{}')"
    small = await create_pool(db_dsn, min_size=1, max_size=1)
    client = LeavingRequest()
    frames: list[dict[str, Any]] = []

    async def stream() -> None:
        bounded = BoundedPool(small, 0.05)
        async for frame in events._stream(
            client, bounded, QuietBus(), ("t", "busy", created_at), 0
        ):  # type: ignore[arg-type]
            frames.append(frame)

    task = asyncio.create_task(stream())
    try:
        await _until(lambda: events.LIVE in frames)
        held = await small.acquire()  # every connection held: each catch-up waits, gives up
        try:
            await asyncio.sleep(INTERVAL * 6)
            assert not task.done(), task  # still open (it raised PoolExhausted before)
        finally:
            await small.release(held)
        new = await pool.fetchval(insert + " RETURNING id", "after")
        await _until(lambda: any(f.get("id") == str(new) for f in frames))  # read later
    finally:
        client.gone = True
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)
        await small.close()


async def test_a_replay_on_a_busy_pool_ends_the_stream_with_a_reconnect(
    db_dsn: str, pool: asyncpg.Pool
) -> None:
    """The stream's replay, its first read once the response began, finds every connection
    held: the stream ends with a ``retry:`` frame and no ``id`` (the client's Last-Event-ID
    stays the last it got, so its reconnect replays from there), not with an error out of a
    response already begun."""
    created_at = await pool.fetchval(
        "INSERT INTO sessions (tenant, id) VALUES ('t', 'busy') RETURNING created_at"
    )
    small = await create_pool(db_dsn, min_size=1, max_size=1)
    frames: list[dict[str, Any]] = []
    try:
        async with small.acquire():  # held as the stream opens
            session = ("t", "busy", created_at)
            stream = events._stream(
                LeavingRequest(), BoundedPool(small, 0.05), QuietBus(), session, 0
            )  # type: ignore[arg-type]
            async with asyncio.timeout(5):
                frames = [frame async for frame in stream]
    finally:
        await small.close()
    assert [set(f) for f in frames] == [{"comment", "retry"}], frames
