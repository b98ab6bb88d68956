"""A migration that waits for a table's lock while replicas serve (a rolling upgrade): its
statement queues for a lock that a long transaction holds (a ``pg_dump`` running, a report's
query), and every request's statement on that table queues behind it. The runner gives way
instead of freezing the table for as long as that transaction lasts."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from proxy.store import migrations
from proxy.store.migrations import run_migrations

HANG = 30  # a bound on a hang: the awaited state comes in well under a second


async def _queued_for_a_lock(admin: asyncpg.Connection, query: str, task: asyncio.Task) -> None:
    """Return once a statement like ``query`` waits for a lock (or ``task`` ended: its
    result says why). ``admin`` is outside any transaction, so each read sees the present."""
    sql = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND query LIKE $1"
    )
    deadline = time.monotonic() + HANG
    while not task.done() and not await admin.fetchval(sql, query):
        assert time.monotonic() < deadline, f"{query} never waited for a lock"
        await asyncio.sleep(0.02)


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
        await _queued_for_a_lock(reader, "%ALTER TABLE t %", migrating)
        assert await asyncio.wait_for(reader.fetchval("SELECT x FROM t"), HANG) == 1
        assert not migrating.done()  # it waits for its turn, not refused
        await held.rollback()
        assert await asyncio.wait_for(migrating, HANG) == ["0002_y.sql"]
    finally:
        await holder.close()
        await reader.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings and warnings[0].startswith("migration 0002_y.sql waits for a lock"), warnings


async def test_a_long_backfill_waits_out_the_row_locks_of_short_request_transactions(
    empty_db_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A migration rewriting every session's row (0025, 0026, 0027) while requests run: each
    request's transaction holds a row for a moment (a lease taken, a step stored), and the
    migration waits for it row by row. Each wait is one transaction's length, well under the
    bound, so the migration runs through once, not restarted whenever it meets a held row."""
    monkeypatch.setattr(migrations, "LOCK_WAIT_SECONDS", 0.3)  # the bound, scaled down
    (tmp_path / "0001_t.sql").write_text(
        "CREATE TABLE t (id int PRIMARY KEY, x int); "
        "INSERT INTO t SELECT i, 0 FROM generate_series(1, 20) i;"
    )
    await run_migrations(empty_db_dsn, tmp_path)
    (tmp_path / "0002_backfill.sql").write_text(  # a row every 20 ms: ~0.4 s in all
        "UPDATE t SET x = x + 1 WHERE pg_sleep(0.02) IS NOT NULL;"
    )
    requests = [await asyncpg.connect(empty_db_dsn) for _ in range(3)]
    held: list[int] = []

    async def serve(conn: asyncpg.Connection, start: int) -> None:
        row = start
        while True:  # a request's transaction: one row held for 50 ms (a sixth of the bound)
            async with conn.transaction():
                await conn.execute("UPDATE t SET x = x WHERE id = $1", row)
                held.append(row)
                await asyncio.sleep(0.05)
            row = row % 20 + 1

    caplog.set_level(logging.WARNING, logger="cascade")
    serving = [asyncio.create_task(serve(c, 1 + 7 * i)) for i, c in enumerate(requests)]
    try:
        await asyncio.sleep(0.1)
        assert await asyncio.wait_for(run_migrations(empty_db_dsn, tmp_path), HANG) == [
            "0002_backfill.sql"
        ]
    finally:
        for task in serving:
            task.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
        for conn in requests:
            conn.terminate()
    assert len(held) > 10  # the requests did run meanwhile
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # never gave way


_MIGRATE = """
import sys
from pathlib import Path
from proxy import cli
from proxy.store import migrations

migrations.MIGRATIONS_DIR = Path(sys.argv[1])
migrations.LOCK_WAIT_SECONDS = 0.2
migrations.LOCK_RETRY_SECONDS = 600  # a stop that waited for the next attempt would hang
raise SystemExit(cli.main(["migrate", "--database-url", sys.argv[2]]))
"""


async def test_migrate_held_behind_a_long_transaction_says_so_and_stops_on_sigterm(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """``cascade-proxy migrate`` waiting for its turn is not silent: the warning reaches its
    stderr (no logging configured, Python's last-resort handler), without the URL; a
    supervisor's ``timeout`` (SIGTERM) ends it promptly with 143, the migration not applied."""
    (tmp_path / "0001_t.sql").write_text("CREATE TABLE t (x int); INSERT INTO t VALUES (1);")
    await run_migrations(empty_db_dsn, tmp_path)
    (tmp_path / "0002_y.sql").write_text("ALTER TABLE t ADD COLUMN y int;")
    holder = await asyncpg.connect(empty_db_dsn)
    held = holder.transaction()
    await held.start()
    await holder.fetchval("SELECT x FROM t")
    err = tmp_path / "stderr"
    with err.open("wb") as sink:
        child = subprocess.Popen(
            [sys.executable, "-c", _MIGRATE, str(tmp_path), empty_db_dsn],
            cwd=Path(__file__).parents[2],
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + HANG
        while "waits for a lock" not in err.read_text():
            assert child.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "no warning while it waits"
            await asyncio.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        started = time.monotonic()
        while child.poll() is None:
            assert time.monotonic() - started < HANG, "SIGTERM did not end the wait"
            await asyncio.sleep(0.05)
        assert child.returncode == 128 + signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        await held.rollback()
    text = err.read_text()
    assert text.count("waits for a lock") == 1 and "Traceback" not in text, text
    assert urlsplit(empty_db_dsn).netloc not in text
    assert await holder.fetchval("SELECT count(*) FROM schema_migrations") == 1
    await holder.close()


async def test_a_lock_timeout_of_the_database_does_not_bound_the_wait_for_another_replica(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """A database or role whose default ``lock_timeout`` is short (a common guard for an
    application's role): a replica starting while another runs a long migration waits for
    its turn, as README says, rather than refusing the start on the advisory lock's wait."""
    admin = await asyncpg.connect(empty_db_dsn)
    try:
        await admin.execute(
            "DO $$ BEGIN EXECUTE format("
            "'ALTER DATABASE %I SET lock_timeout = 100', current_database());"
            " END $$"
        )
        (tmp_path / "0001_t.sql").write_text("CREATE TABLE t (x int);")
        migrating = await asyncpg.connect(empty_db_dsn)  # another replica's migration
        held = migrating.transaction()
        await held.start()
        await migrating.execute("SELECT pg_advisory_xact_lock($1)", migrations._LOCK_KEY)
        starting = asyncio.create_task(run_migrations(empty_db_dsn, tmp_path))
        await _queued_for_a_lock(admin, "%pg_advisory_xact_lock%", starting)
        await asyncio.sleep(0.4)  # waiting past the database's lock_timeout
        await held.commit()
        await migrating.close()
        assert await asyncio.wait_for(starting, HANG) == ["0001_t.sql"]
    finally:
        await admin.close()


async def test_a_statement_timeout_of_the_database_cuts_neither_a_long_migration_nor_the_turn(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """A default ``statement_timeout`` (set for requests' statements) would cancel a slow
    migration (0027 reading every event) at each start, and a replica's wait for another's
    migration: both refused starts. The migrations' transactions run without it."""
    admin = await asyncpg.connect(empty_db_dsn)
    try:
        await admin.execute(
            "DO $$ BEGIN EXECUTE format("
            "'ALTER DATABASE %I SET statement_timeout = 100', current_database()); END $$"
        )
        (tmp_path / "0001_slow.sql").write_text("SELECT pg_sleep(0.3);")
        migrating = await asyncpg.connect(empty_db_dsn)  # another replica's migration
        held = migrating.transaction()
        await held.start()
        await migrating.execute("SET LOCAL statement_timeout = 0")
        await migrating.execute("SELECT pg_advisory_xact_lock($1)", migrations._LOCK_KEY)
        starting = asyncio.create_task(run_migrations(empty_db_dsn, tmp_path))
        await _queued_for_a_lock(admin, "%pg_advisory_xact_lock%", starting)
        await asyncio.sleep(0.3)  # waiting past the database's statement_timeout
        await held.commit()
        await migrating.close()
        assert await asyncio.wait_for(starting, HANG) == ["0001_slow.sql"]
    finally:
        await admin.close()
