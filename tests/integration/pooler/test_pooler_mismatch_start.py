"""A replica pointed at a transaction pooler without ``CASCADE_DB_POOLER=transaction``
refuses to start with one line (README, Behind a connection pooler). Its pool opens
several connections at once (the warm-up's floor); when one is refused, asyncpg gives up on
the pool while the others are still connecting, and those that then failed the same way were
still running when ``serve``'s event loop shut down, each printed as a traceback under that
line. The pool's start waits for its own connections before it says why it failed."""

from __future__ import annotations

import asyncio

import pytest

from proxy.store.db import PoolerMismatch, create_pool
from tests.integration.pooler.pgbouncer import PgBouncer


def _connecting() -> list[asyncio.Task]:
    return [
        task
        for task in asyncio.all_tasks()
        if not task.done() and "PoolConnectionHolder.connect" in repr(task.get_coro())
    ]


async def test_a_refused_pool_leaves_no_connection_attempt_running(
    pgbouncer: PgBouncer, db_dsn: str
) -> None:
    dsn = pgbouncer.pooled(db_dsn)
    for _ in range(5):  # a pooler may happen to carry the statements; it seldom does five times
        try:
            pool = await asyncio.wait_for(create_pool(dsn, min_size=10, max_size=10), 20)
        except PoolerMismatch:
            break
        await asyncio.wait_for(pool.close(), 5)
    else:
        pytest.skip("the pooler carried every statement: nothing was refused")
    left = _connecting()
    if left:
        await asyncio.wait(left, timeout=5)  # not left to the next test
    assert left == []
