"""proxy.warmup: a replica's pool is opened and its step statements compiled at start, and the
warm-up stores nothing (docs/perf.md, Issue 24: a fresh replica's first burst)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from proxy.store.db import Connection
from proxy.store.steps import BEGIN_STEP
from proxy.warmup import WARM_TENANT, open_pool, warm_connection, warm_pool
from tests.integration.api.conftest import StartProxy
from tests.integration.conftest import pooler_everywhere

PREPARED = "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1"


async def test_a_warmed_connection_has_the_step_prepared_and_nothing_is_stored(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        if pooler_everywhere():
            pytest.skip("behind a transaction pooler asyncpg prepares nothing that lasts")
        assert await conn.fetchval(PREPARED, BEGIN_STEP) == 0
        await warm_connection(conn)
        assert await conn.fetchval(PREPARED, BEGIN_STEP) == 1  # asyncpg's cache holds it
        assert not conn.is_in_transaction()
    stored = await pool.fetchval("SELECT count(*) FROM sessions WHERE tenant = $1", WARM_TENANT)
    assert stored == 0
    assert await pool.fetchval("SELECT count(*) FROM messages WHERE tenant = $1", WARM_TENANT) == 0


async def test_warm_pool_opens_and_warms_that_many_connections(pool: asyncpg.Pool) -> None:
    warmed: list[int] = []

    async def note(conn: Connection) -> None:
        warmed.append(await conn.fetchval("SELECT pg_backend_pid()"))

    assert await warm_pool(pool, 3, timeout=5, warm=note) == 3
    if not pooler_everywhere():  # PgBouncer may run the three on one server connection
        assert len(set(warmed)) == 3  # held at once: three backends, not one three times
    assert pool.get_size() >= 3
    assert pool.get_idle_size() == pool.get_size()  # all given back


async def test_a_failing_warm_up_is_logged_and_the_pool_still_serves(
    pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(conn: Connection) -> None:
        await conn.execute("SELECT * FROM no_such_table")

    with caplog.at_level(logging.WARNING, logger="cascade"):
        assert await warm_pool(pool, 2, timeout=5, warm=broken) == 0
    assert "2 of 2 connections not warmed" in caplog.text
    assert await pool.fetchval("SELECT 1") == 1


def _backends(dsn: str) -> tuple[list[int], int]:
    """The proxy's pooled backends (its listening one left out), and the stored sessions."""

    async def read() -> tuple[list[int], int]:
        conn = await asyncpg.connect(dsn)
        try:
            pids = await conn.fetchval(
                "SELECT array_agg(pid ORDER BY pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND backend_type = 'client backend'"
                " AND pid <> pg_backend_pid() AND query NOT LIKE 'LISTEN%'"
            )
            return list(pids or []), await conn.fetchval("SELECT count(*) FROM sessions")
        finally:
            await conn.close()

    return asyncio.run(read())


def test_the_replica_starts_with_its_pool_open_and_stores_nothing(
    db_dsn: str, start_proxy: StartProxy, config_path: Path
) -> None:
    if pooler_everywhere():
        pytest.skip("PgBouncer opens the server connections, not the replica")
    start_proxy(config_path, pool_max_size=3)
    opened, stored = _backends(db_dsn)
    assert len(opened) == 3  # without the warm-up, the pool's one connection (min_size)
    assert stored == 0


def test_the_warmed_connections_stay_open_past_the_idle_lifetime(
    db_dsn: str, start_proxy: StartProxy, config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's floor is the warmed connections: idle past asyncpg's
    ``max_inactive_connection_lifetime`` (300 s, here 0.3 s), the same backends are open, so
    a burst after a quiet spell finds them warm (without the floor, one is left)."""
    if pooler_everywhere():
        pytest.skip("PgBouncer opens the server connections, not the replica")
    create_pool = asyncpg.create_pool

    def short_lived(*args: Any, **kwargs: Any) -> Any:
        return create_pool(*args, **{**kwargs, "max_inactive_connection_lifetime": 0.3})

    monkeypatch.setattr(asyncpg, "create_pool", short_lived)
    start_proxy(config_path, pool_max_size=3)
    warmed, _ = _backends(db_dsn)
    time.sleep(1.5)  # five times the idle lifetime
    idle, _ = _backends(db_dsn)
    assert len(warmed) == 3
    assert idle == warmed


async def test_a_database_that_refuses_the_floor_still_gets_a_pool(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A role allowed fewer connections than the pool's floor: the pool opens with one and
    grows on demand up to what PostgreSQL allows, and a warning names what was refused (the
    floor is best-effort, like the warm-up; without the fallback the start fails)."""
    if pooler_everywhere():
        pytest.skip("PgBouncer opens the server connections, not the replica")
    role = f"lim_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(db_dsn)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'x' CONNECTION LIMIT 2")
        parts = urlsplit(db_dsn)
        host = parts.netloc.rsplit("@", 1)[-1]
        limited = urlunsplit(parts._replace(netloc=f"{role}:x@{host}"))
        # Five starts in a row: the refused attempt's backends linger a moment, and a
        # fallback that tried once failed about one start in ten (CI saw it).
        for _ in range(5):
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="cascade"):
                pool = await open_pool(limited, max_size=5)
            try:
                assert pool.get_min_size() == 1
                assert await pool.fetchval("SELECT 1") == 1
                assert any("refused 5 pooled connections" in r.getMessage() for r in caplog.records)
            finally:
                await pool.close()
    finally:
        await admin.execute(f"DROP OWNED BY {role}")
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()
