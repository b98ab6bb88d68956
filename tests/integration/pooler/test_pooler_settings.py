"""Why ``CASCADE_DB_POOLER=transaction`` exists, shown on a real PgBouncer, and that the
event bus's LISTEN, opened from ``DATABASE_LISTEN_URL``, carries what only NOTIFY carries.

Behind a transaction-mode pooler a client connection's transactions run on whichever server
connection is free. asyncpg's statement cache prepares a named statement on one server and
binds it later on another, which has no such statement. The proxy's own pool
(``create_pool``) is opened here both ways on the same pooler and the same statements.
"""

from __future__ import annotations

import asyncpg

from proxy.cascade.types import EVICTED
from proxy.store.db import create_pool, pooler_kwargs
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_events import open_events
from tests.integration.api.test_eviction import Agent, config_file, proxy

__all__ = ["config_file", "proxy"]  # test_eviction's proxy, behind the pooler (conftest)

ROUNDS = 10


async def statements_lost(pool: asyncpg.Pool) -> list[str]:
    """SQLSTATEs of the statements that failed when one client connection ran a statement
    again while another held, in a transaction, the server it had first run on.

    PgBouncer lends its most recently used idle server first, so the holder gets the server
    the statement ran on nearly every round, and the rerun goes to another one."""
    lost: list[str] = []
    for n in range(ROUNDS):
        sql = f"SELECT $1::int + {n}"  # a statement new to every server each round
        async with pool.acquire() as a:
            assert await a.fetchval(sql, 1) == n + 1
            async with pool.acquire() as b, b.transaction():
                await b.fetchval("SELECT $1::int", n)
                try:
                    assert await a.fetchval(sql, 2) == n + 2
                except asyncpg.PostgresError as exc:
                    lost.append(exc.sqlstate)
    return lost


async def test_the_statement_cache_breaks_behind_the_pooler_and_the_setting_turns_it_off(
    pooled_dsn: str,
) -> None:
    cached = await create_pool(pooled_dsn, min_size=2, max_size=2)
    try:
        lost = await statements_lost(cached)
    finally:
        await cached.close()
    assert lost, "every cached statement found its server: the pooler did not multiplex"
    assert set(lost) == {"26000"}  # invalid_sql_statement_name: prepared elsewhere

    uncached = await create_pool(pooled_dsn, min_size=2, max_size=2, **pooler_kwargs("transaction"))
    try:
        assert await statements_lost(uncached) == []
    finally:
        await uncached.close()


def test_a_transient_event_reaches_a_stream_through_the_listen_url(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """``context.evicted`` is never stored: it reaches a stream only as a NOTIFY, sent by a
    statement that went through the pooler and heard on the bus's direct connection."""
    assert proxy.settings.db_pooler == "transaction"
    assert proxy.settings.database_listen_url != proxy.settings.database_url
    agent = Agent(proxy, fake_upstream)
    agent.step("keep_me")  # the session exists: its stream can open
    with open_events(proxy.origin, "agent") as events:
        events.until(lambda f: f.event == "context.usage")  # the replay: subscribed
        agent.run_until_evicted()
        evicted = events.until(lambda f: f.event == EVICTED, max_frames=200)[-1]
    assert evicted.id is None  # transient: no id, no replay
    assert evicted.data["session_id"] == "agent"
