"""A migration giving way to a long transaction (README, Deploying) behind PgBouncer in
transaction mode: its ``lock_timeout`` is the transaction's own (``SET LOCAL``), so the server
connection it ran on goes back to the pool without it, where a request's statement would
otherwise give up on any lock after a second; a start stopped while it waits to try again
ends at once, with nothing held."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import asyncpg
import pytest

from proxy.store import migrations
from proxy.store.db import pooler_kwargs
from proxy.store.migrations import _LOCK_KEY, run_migrations
from tests.integration.pooler.pgbouncer import PgBouncer

ALTER = "ALTER TABLE t ADD COLUMN y int;"


async def _held_open(dsn: str) -> tuple[asyncpg.Connection, asyncpg.transaction.Transaction]:
    """A long transaction (a ``pg_dump``) that read ``t``, on a direct connection."""
    holder = await asyncpg.connect(dsn)
    held = holder.transaction()
    await held.start()
    await holder.fetchval("SELECT x FROM t")
    return holder, held


async def test_a_pooled_migration_gives_way_once_warned_and_leaves_no_lock_timeout(
    empty_db_dsn: str,
    pgbouncer: PgBouncer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(migrations, "LOCK_WAIT_SECONDS", 0.2)
    monkeypatch.setattr(migrations, "LOCK_RETRY_SECONDS", 0.1)
    pooled, kwargs = pgbouncer.pooled(empty_db_dsn), pooler_kwargs("transaction")
    (tmp_path / "0001_t.sql").write_text("CREATE TABLE t (x int); INSERT INTO t VALUES (1);")
    await run_migrations(pooled, tmp_path, **kwargs)
    (tmp_path / "0002_y.sql").write_text(ALTER)
    holder, held = await _held_open(empty_db_dsn)
    caplog.set_level(logging.WARNING, logger="cascade")
    try:
        migrating = asyncio.create_task(run_migrations(pooled, tmp_path, **kwargs))
        await asyncio.sleep(1.0)  # three tries or more, each given way
        assert not migrating.done()
        await held.rollback()
        assert await asyncio.wait_for(migrating, 5) == ["0002_y.sql"]
    finally:
        await holder.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("migration 0002_y.sql waits"), warnings
    request = await asyncpg.connect(pooled, **kwargs)
    try:  # the pool's server connections lent in turn: the migration's among them
        timeouts = {await request.fetchval("SHOW lock_timeout") for _ in range(20)}
        assert timeouts == {"0"}
        assert await request.fetchval("SELECT count(*) FROM schema_migrations") == 2
    finally:
        await request.close()


async def test_a_pooled_start_stopped_between_tries_ends_at_once_holding_nothing(
    empty_db_dsn: str, pgbouncer: PgBouncer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM during the start cancels it (README, Stopping), here while it waits to try the
    migration again: it ends within the second, the advisory lock free for another replica."""
    monkeypatch.setattr(migrations, "LOCK_WAIT_SECONDS", 0.1)
    monkeypatch.setattr(migrations, "LOCK_RETRY_SECONDS", 30)
    pooled, kwargs = pgbouncer.pooled(empty_db_dsn), pooler_kwargs("transaction")
    (tmp_path / "0001_t.sql").write_text("CREATE TABLE t (x int); INSERT INTO t VALUES (1);")
    await run_migrations(pooled, tmp_path, **kwargs)
    (tmp_path / "0002_y.sql").write_text(ALTER)
    holder, held = await _held_open(empty_db_dsn)
    try:
        migrating = asyncio.create_task(run_migrations(pooled, tmp_path, **kwargs))
        await asyncio.sleep(0.5)  # gave way, now in its pause
        migrating.cancel()
        done, _ = await asyncio.wait({migrating}, timeout=1)
        assert done and migrating.cancelled()
        assert await holder.fetchval("SELECT pg_try_advisory_xact_lock($1)", _LOCK_KEY)
    finally:
        await held.rollback()
        await holder.close()
    assert await run_migrations(pooled, tmp_path, **kwargs) == ["0002_y.sql"]


async def test_a_pooled_migration_reads_strings_as_the_check_and_leaves_the_setting(
    empty_db_dsn: str, pgbouncer: PgBouncer, tmp_path: Path
) -> None:
    """Behind PgBouncer in transaction mode, on a database with ``standard_conforming_strings``
    off: the runner's ``SET LOCAL`` turns it on for the migration (its ``DROP`` is in a
    string and a comment, as the floor check reads it) and leaves every server connection
    lent to a request as the database sets it."""
    pooled, kwargs = pgbouncer.pooled(empty_db_dsn), pooler_kwargs("transaction")
    admin = await asyncpg.connect(empty_db_dsn)
    try:
        name = await admin.fetchval("SELECT current_database()")
        await admin.execute(f'ALTER DATABASE "{name}" SET standard_conforming_strings = off')
    finally:
        await admin.close()
    (tmp_path / "0001_keep.sql").write_text("CREATE TABLE keep (x int);")
    (tmp_path / "0002_note.sql").write_text("SELECT 'a\\'; -- '; DROP TABLE keep;")
    assert await run_migrations(pooled, tmp_path, **kwargs) == ["0001_keep.sql", "0002_note.sql"]
    request = await asyncpg.connect(pooled, **kwargs)
    try:
        assert await request.fetchval("SELECT to_regclass('keep') IS NOT NULL")
        read = {await request.fetchval("SHOW standard_conforming_strings") for _ in range(20)}
        assert read == {"off"}
    finally:
        await request.close()
