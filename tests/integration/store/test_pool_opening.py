"""The pool's start waits for the connections it was opening when one is refused
(``store.db.create_pool``); the tasks it notes for that are the start's own: a request
that opens a connection later, as a pool grows under load or replaces one closed while
idle, is not kept for the process's life, nor what it returned or raised."""

from __future__ import annotations

import asyncio
import gc
import weakref

from proxy.store.db import create_pool


async def test_a_task_that_opened_a_pooled_connection_is_not_kept(db_dsn: str) -> None:
    pool = await create_pool(db_dsn, min_size=1, max_size=2)
    try:

        async def request() -> bytes:
            async with pool.acquire() as one, pool.acquire() as two:  # the second one opens
                await one.fetchval("SELECT 1")
                await two.fetchval("SELECT 1")
            return b"a reply body" * 1000

        task = asyncio.create_task(request())
        await task
        gone = weakref.ref(task)
        del task
        await asyncio.sleep(0)  # the loop's own callbacks of its end have run
        gc.collect()
        assert gone() is None, "the pool keeps the task that opened one of its connections"
    finally:
        await asyncio.wait_for(pool.close(), 5)
