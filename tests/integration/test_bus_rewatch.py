"""Regression: a stream opened on a session while the replica's last stream on it was closing
could lose the session's ``event_watchers`` row: the closing stream's DELETE ran after the
new stream's registration, so the session's persisted events were announced to no one
(the new stream got them only from its catch-up reads) and other replicas took it for
unwatched, sending no delta, until the keeper's next round. The closing stream registers
the session again once its DELETE is done if a stream opened on it meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from proxy.bus import EventBus
from proxy.cascade.types import USAGE
from proxy.store import events as store
from tests.integration.store.helpers import create_session


async def test_a_stream_opened_while_the_last_one_unwatches_stays_watched(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    bus = EventBus(pool, db_dsn)
    await bus.start()
    unwatching, done = asyncio.Event(), asyncio.Event()
    unwatch = store.unwatch

    async def held_unwatch(conn: Any, **kwargs: Any) -> None:
        unwatching.set()
        await done.wait()  # the new stream registers first
        await unwatch(conn, **kwargs)

    async def first_stream() -> None:
        async with bus.subscribe("t", "s"):
            pass

    monkeypatch.setattr(store, "unwatch", held_unwatch)
    try:
        closing = asyncio.create_task(first_stream())
        await asyncio.wait_for(unwatching.wait(), 5)
        async with bus.subscribe("t", "s") as queue:
            done.set()
            await asyncio.wait_for(closing, 5)
            rows = await pool.fetchval(
                "SELECT count(*) FROM event_watchers WHERE tenant = 't' AND session_id = 's'"
            )
            assert rows == 1
            event_id = await bus.publish(pool, tenant="t", session_id="s", name=USAGE, data={})
            got = await asyncio.wait_for(queue.get(), 5)
            assert got.id == event_id
    finally:
        await bus.stop()
