"""The floor and ``serve``'s stop before a breaking migration behind PgBouncer in transaction
mode (no prepared statements): an old replica idle between its transactions holds no server
connection, so no client count can clear the start, and a database holding sessions is
enough to refuse; ``migrate`` applies it."""

from __future__ import annotations

import shutil
from pathlib import Path

import asyncpg
import pytest

from proxy.store.db import APPLICATION_NAME, connect, pooler_kwargs
from proxy.store.migrations import MIGRATIONS_DIR, MigrationError, run_migrations
from tests.integration.conftest import execute
from tests.integration.pooler.pgbouncer import PgBouncer


async def _at_0019_with_a_session(dsn: str, tree: Path) -> None:
    for path in sorted(MIGRATIONS_DIR.glob("00[01][0-9]_*.sql")):
        shutil.copy(path, tree / path.name)
    await run_migrations(dsn, tree)
    await execute(dsn, "INSERT INTO sessions(tenant, id) VALUES ('t', 'old')")


async def test_a_pooled_serve_stops_before_a_breaking_migration_on_a_database_with_sessions(
    empty_db_dsn: str, pgbouncer: PgBouncer, tmp_path: Path
) -> None:
    pooled, kwargs = pgbouncer.pooled(empty_db_dsn), pooler_kwargs("transaction")
    await _at_0019_with_a_session(empty_db_dsn, tmp_path)
    old_replica = await asyncpg.connect(pooled, **kwargs)
    try:
        await old_replica.fetchval("SELECT count(*) FROM sessions")
        with pytest.raises(MigrationError, match=r"^migration 0020_begin_step_v5\.sql breaks"):
            await run_migrations(pooled, serving=True, **kwargs)
    finally:
        await old_replica.close()
    applied = await run_migrations(pooled, **kwargs)  # the operator's migrate
    assert applied[0] == "0020_begin_step_v5.sql"


async def test_a_pooled_release_below_the_floor_refuses(
    empty_db_dsn: str, pgbouncer: PgBouncer, tmp_path: Path
) -> None:
    """The floor set and read through the pooler: the COMMENT a migration runs, and the
    ledger's comment read with prepared statements off."""
    pooled, kwargs = pgbouncer.pooled(empty_db_dsn), pooler_kwargs("transaction")
    (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (x int)")
    floor = "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0002'"
    (tmp_path / "0002_b.sql").write_text(floor)
    assert await run_migrations(pooled, tmp_path, **kwargs) == ["0001_a.sql", "0002_b.sql"]
    (tmp_path / "0002_b.sql").unlink()
    with pytest.raises(MigrationError, match="with migration 0002 or later"):
        await run_migrations(pooled, tmp_path, serving=True, **kwargs)


async def test_the_pooler_passes_cascade_s_name_to_the_server(
    empty_db_dsn: str, pgbouncer: PgBouncer
) -> None:
    """PgBouncer hands the client's ``application_name`` to the server connection it lends:
    a replica behind it reads as Cascade's in ``pg_stat_activity`` while it holds one."""
    conn = await connect(pgbouncer.pooled(empty_db_dsn), **pooler_kwargs("transaction"))
    try:
        async with conn.transaction():
            assert await conn.fetchval("SHOW application_name") == APPLICATION_NAME
            assert await conn.fetchval(_NAME) == APPLICATION_NAME
    finally:
        await conn.close()


_NAME = "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
