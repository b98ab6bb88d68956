"""A migration that waits for a table's lock while replicas serve (a rolling upgrade): its
statement queues for a lock that a long transaction holds (a ``pg_dump`` running, a report's
query), and every request's statement on that table queues behind it. The runner gives way
instead of freezing the table for as long as that transaction lasts."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import asyncpg
import pytest

from proxy.store import migrations
from proxy.store.migrations import run_migrations


async def test_a_migration_waiting_for_a_table_lock_lets_requests_through(
    empty_db_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(migrations, "LOCK_WAIT_SECONDS", 0.2)
    monkeypatch.setattr(migrations, "LOCK_RETRY_SECONDS", 0.1)
    (tmp_path / "0001_t.sql").write_text("CREATE TABLE t (x int); INSERT INTO t VALUES (1);")
    await run_migrations(empty_db_dsn, tmp_path)
    (tmp_path / "0002_y.sql").write_text("ALTER TABLE t ADD COLUMN y int;")
    holder = await asyncpg.connect(empty_db_dsn)  # a long transaction that read t
    reader = await asyncpg.connect(empty_db_dsn)  # a replica's request
    caplog.set_level(logging.WARNING, logger="cascade")
    try:
        held = holder.transaction()
        await held.start()
        await holder.fetchval("SELECT x FROM t")
        migrating = asyncio.create_task(run_migrations(empty_db_dsn, tmp_path))
        await asyncio.sleep(0.3)  # the ALTER has queued for the holder's lock
        assert await asyncio.wait_for(reader.fetchval("SELECT x FROM t"), 2) == 1
        assert not migrating.done()  # it waits for its turn, not refused
        await held.rollback()
        assert await asyncio.wait_for(migrating, 5) == ["0002_y.sql"]
    finally:
        await holder.close()
        await reader.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings and warnings[0].startswith("migration 0002_y.sql waits for a lock"), warnings
