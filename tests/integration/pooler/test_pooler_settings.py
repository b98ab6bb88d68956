"""Why ``CASCADE_DB_POOLER=transaction`` and ``DATABASE_LISTEN_URL`` exist, shown on a real
PgBouncer: each test runs the same steps with and without the setting.

Behind a transaction-mode pooler a client connection's transactions run on whichever server
connection is free. asyncpg's statement cache prepares a named statement on one server and
binds it later on another, which has no such statement. The proxy's own pool
(``create_pool``) is opened here both ways on the same pooler and the same statements.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from proxy.cascade.types import EVICTED
from proxy.settings import Settings
from proxy.store.db import PoolerMismatch, create_pool, pooler_kwargs
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_events import EventStream, Frame, open_events
from tests.integration.api.test_eviction import Agent, config_path

__all__ = ["config_path"]  # test_eviction's config; its proxy is the conftest's, pooled

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
                except PoolerMismatch as exc:  # asyncpg's error, saying what to set
                    assert exc.sqlstate is not None
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


@pytest.fixture
def listening_through_the_pooler(pooled_dsn: str, config_path: Path) -> Iterator[ProxyServer]:
    """A proxy behind the pooler without ``DATABASE_LISTEN_URL``: its bus LISTENs through
    PgBouncer (the proxy warns at start)."""
    settings = Settings(
        database_url=pooled_dsn, db_pooler="transaction", config=config_path, watch_config=False
    )
    assert settings.database_listen_url is None
    server = ProxyServer(settings).start()
    yield server
    server.stop()


def drain(events: EventStream) -> list[Frame]:
    """Every frame until none comes for the stream's read timeout (pings are every 15 s)."""
    frames: list[Frame] = []
    try:
        while True:
            frames.append(events.next())
    except httpx.ReadTimeout:
        return frames


def test_without_a_listen_url_a_stream_hears_no_notification(
    listening_through_the_pooler: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The same steps as above, with the LISTEN through PgBouncer: its server connection went
    back to the pool when the LISTEN ended, so no NOTIFY reaches the bus. Stored events
    still arrive, from the stream's catch-up reads of the table; the transient one never."""
    proxy = listening_through_the_pooler
    agent = Agent(proxy, fake_upstream)
    agent.step("keep_me")
    with open_events(proxy.origin, "agent") as events:
        events.until(lambda f: f.event == "context.usage")
        agent.run_until_evicted()
        frames = drain(events)
    usages = [f for f in frames if f.event == "context.usage"]
    assert len(usages) == len(agent.prompts) - 1  # every later step's, by catch-up
    assert EVICTED not in {f.event for f in frames}


def test_readyz_says_a_listener_through_the_pooler_leaves_streams_to_their_catch_up(
    listening_through_the_pooler: ProxyServer,
) -> None:
    """Its LISTEN hears nothing (above), which only the start's warning said while
    ``/readyz`` said ``events: ok``: it says ``catch-up``, still a 200."""
    ready = httpx.get(f"{listening_through_the_pooler.origin}/readyz", timeout=5)
    assert ready.status_code == 200
    assert ready.json() == {"status": "ok", "database": "ok", "events": "catch-up"}
