"""An older release on a schema a newer one migrated, and replicas that migrate together.

Migrations are expand-only unless one sets the ledger's floor (``migrations.FLOOR``): an
older release beside a newer schema keeps serving with a warning (a rolling upgrade, a
rollback), and one below the floor refuses to start in one line naming both versions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
from pathlib import Path

import asyncpg
import pytest

from proxy.app import create_app
from proxy.cli import main
from proxy.settings import Settings
from proxy.store.migrations import MIGRATIONS_DIR, MigrationError, run_migrations
from tests.integration.conftest import execute


def _tree(tmp_path: Path, *bodies: str) -> Path:
    for i, body in enumerate(bodies, 1):
        (tmp_path / f"{i:04d}_m{i}.sql").write_text(body)
    return tmp_path


async def test_a_release_below_the_floor_refuses_naming_both_versions(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """A newer release whose migration 0003 breaks older code sets the floor to 0003: the
    release whose last is 0002 (a rollback) refuses, naming the schema's newest migration,
    the floor and its own last, and writes nothing."""
    floor = "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0003'"
    tree = _tree(tmp_path, "CREATE TABLE a (x int)", "CREATE TABLE b (y int)", floor)
    await run_migrations(empty_db_dsn, tree)
    (tree / "0003_m3.sql").unlink()
    with pytest.raises(MigrationError) as refused:
        await run_migrations(empty_db_dsn, tree)
    assert str(refused.value) == (
        "the database's schema (migrated to 0003_m3.sql) is served only by a release with"
        " migration 0003 or later, and this release's last is 0002_m2.sql: run the newer"
        " release, or restore the backup taken before the upgrade (README: Upgrading)"
    )
    (tree / "0003_m3.sql").write_text(floor)  # the release that set it starts
    assert await run_migrations(empty_db_dsn, tree) == []


async def test_a_later_migration_setting_an_older_floor_leaves_the_higher_one(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """0003 breaks every release before it; 0004 drops what only releases before 0002 call
    and says 'serves from 0002': a release at 0002 is still broken by 0003 and refuses."""
    tree = _tree(
        tmp_path,
        "CREATE TABLE a (x int)",
        "CREATE TABLE b (y int)",
        "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0003'",
        "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0002'",
    )
    await run_migrations(empty_db_dsn, tree)
    (tree / "0003_m3.sql").unlink()
    (tree / "0004_m4.sql").unlink()
    with pytest.raises(MigrationError, match="with migration 0003 or later"):
        await run_migrations(empty_db_dsn, tree)


@pytest.mark.parametrize(
    "clears",
    [
        "COMMENT ON TABLE schema_migrations IS NULL",
        "DO $$ BEGIN IF true THEN COMMENT ON TABLE schema_migrations IS 'x'; END IF; END $$",
    ],
)
async def test_a_floor_the_text_sets_holds_whatever_the_migration_sets_after(
    empty_db_dsn: str, tmp_path: Path, clears: str
) -> None:
    """The floor check passes a drop behind the floor a migration's text surely sets; SQL
    after it clearing the ledger's comment (in a branch the reading does not evaluate, say)
    leaves it set, or a release before it would serve the schema it broke."""
    tree = _tree(
        tmp_path,
        "CREATE TABLE a (x int)",
        "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0002';"
        f" DROP TABLE a; {clears}",
    )
    await run_migrations(empty_db_dsn, tree)
    (tree / "0002_m2.sql").unlink()
    with pytest.raises(MigrationError, match="with migration 0002 or later"):
        await run_migrations(empty_db_dsn, tree)


async def test_a_newer_schema_without_a_floor_past_the_release_only_warns(
    empty_db_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Expand-only migrations past an older floor (0002) leave a release at 0002 serving:
    the old replicas of a rolling upgrade restart beside the new ones."""
    floor = "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0002'"
    tree = _tree(tmp_path, "CREATE TABLE a (x int)", floor, "CREATE TABLE c (z int)")
    await run_migrations(empty_db_dsn, tree)
    (tree / "0003_m3.sql").unlink()
    caplog.set_level(logging.WARNING, logger="cascade")
    assert await run_migrations(empty_db_dsn, tree) == []
    [warning] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.startswith("the database holds 1 migrations this release does not have")


def test_migrate_on_a_schema_past_this_release_is_one_line_and_status_2(
    empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What an operator rolling back past a floor sees from ``cascade-proxy migrate`` (and
    ``serve``, whose refusals take the same path): one line, no traceback, nothing written."""
    asyncio.run(run_migrations(empty_db_dsn))
    last = sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))[-1].name
    asyncio.run(
        execute(
            empty_db_dsn,
            "INSERT INTO schema_migrations(version, name, checksum)"
            " VALUES (9999, '9999_future.sql', 'x')",
            "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 9999'",
        )
    )
    for name in [k for k in os.environ if k.startswith(("CASCADE_", "DATABASE_"))]:
        monkeypatch.delenv(name)
    assert main(["migrate", "--database-url", empty_db_dsn]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "migrated to 9999_future.sql" in lines[0]
    assert f"migration 9999 or later, and this release's last is {last}" in lines[0]


async def _at_0019_with_a_session(dsn: str, tree: Path) -> None:
    for path in sorted(MIGRATIONS_DIR.glob("00[01][0-9]_*.sql")):
        shutil.copy(path, tree / path.name)
    await run_migrations(dsn, tree)
    await execute(dsn, "INSERT INTO sessions(tenant, id) VALUES ('t', 'old')")


async def test_serve_stops_before_a_migration_breaking_the_release_that_serves_the_database(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """A database a release at 0019 migrated and serves (its pool's connection open): 0020
    drops the function its chats call, so ``serve`` (a rolling upgrade's first new replica)
    refuses before it, naming it and the release, writing nothing; ``migrate`` (the
    operator, old replicas stopped) applies it, and ``serve`` starts after."""
    await _at_0019_with_a_session(empty_db_dsn, tmp_path)
    app = create_app(Settings(database_url=empty_db_dsn, watch_config=False))
    old_replica = await asyncpg.connect(empty_db_dsn)
    try:
        with pytest.raises(MigrationError) as refused:
            async with app.router.lifespan_context(app):
                pytest.fail("serve was to refuse")
    finally:
        await old_replica.close()
    assert re.match(
        r"migration 0020_begin_step_v5\.sql breaks the release that migrated this database"
        r" \(to 0019_append_v1\.sql\), whose replicas may still serve its sessions \(1 other"
        r" connection to it: 1 unnamed as \w+\), so serve does not apply it: stop every"
        r" replica of that release, run `cascade-proxy migrate`",
        str(refused.value),
    ), refused.value
    assert await run_migrations(empty_db_dsn, tmp_path) == []  # still at 0019
    assert (await run_migrations(empty_db_dsn))[0] == "0020_begin_step_v5.sql"
    replica = await asyncpg.connect(empty_db_dsn)
    try:  # a replica restarting beside another, the database at this release's head
        assert await run_migrations(empty_db_dsn, serving=True) == []
    finally:
        await replica.close()


async def test_serve_applies_a_breaking_migration_when_no_other_client_is_connected(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """The one replica upgraded in place (``make run``, Compose recreating the container,
    the old one stopped), or a ``migrate`` that stopped half way re-run by ``serve``: no
    other client holds the database, so nothing may still serve it and ``serve`` migrates;
    two new replicas starting together do not take each other for old ones."""
    await _at_0019_with_a_session(empty_db_dsn, tmp_path)
    runs = await asyncio.gather(*(run_migrations(empty_db_dsn, serving=True) for _ in range(2)))
    assert "0020_begin_step_v5.sql" in runs[0] + runs[1]


async def test_serve_stops_before_a_migration_that_raises_the_floor(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """A later breaking migration says so by setting the floor, and serve stops before it
    the same way on a database holding sessions that a release below the floor migrated
    and still serves, even when this start applied migrations before it (0002: the release
    is the one at 0001, not the start's own half way); on one without sessions, or migrated
    by a release at the floor, it applies it."""
    floor = "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0002'"
    tree = _tree(tmp_path, "CREATE TABLE sessions (id text)")
    await run_migrations(empty_db_dsn, tree)
    _tree(tmp_path, "CREATE TABLE sessions (id text)", "CREATE TABLE b (y int)", floor)
    await execute(empty_db_dsn, "INSERT INTO sessions VALUES ('old')")
    old_replica = await asyncpg.connect(empty_db_dsn)
    try:
        with pytest.raises(MigrationError, match=r"^migration 0003_m3\.sql breaks .*\(to 0001_m1"):
            await run_migrations(empty_db_dsn, tree, serving=True)
        await execute(empty_db_dsn, "DELETE FROM sessions")
        assert await run_migrations(empty_db_dsn, tree, serving=True) == ["0003_m3.sql"]
        # one that still serves the release at 0002 (an old function dropped only once no
        # release at or past the floor calls it) does not stop serve beside that release
        await execute(empty_db_dsn, "INSERT INTO sessions VALUES ('old')")
        (tree / "0004_m4.sql").write_text(floor)
        assert await run_migrations(empty_db_dsn, tree, serving=True) == ["0004_m4.sql"]
    finally:
        await old_replica.close()


_BUILT = (
    "DO $$ BEGIN EXECUTE format('COMMENT ON TABLE schema_migrations IS %L',"
    " 'cascade: serves from ' || '0002'); END $$;"
)
_BRANCHED = (
    "DO $$ BEGIN IF {} THEN COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0002';"
    " END IF; END $$;"
)


@pytest.mark.parametrize(
    ("seen", "sets"),
    [
        ("", _BUILT),
        ("COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0001';\n", _BUILT),
        ("", _BRANCHED.format("(SELECT count(*) FROM sessions) > 0")),
    ],
)
async def test_a_floor_only_the_database_shows_stops_serve_too(
    empty_db_dsn: str, tmp_path: Path, seen: str, sets: str
) -> None:
    """A migration that sets the floor by SQL it builds, or in a branch of a ``DO`` block
    (which no reading of its text sees or evaluates), is read from the ledger once it ran,
    whether or not its text sets a lower one: ``serve`` beside an unnamed client rolls it
    back and refuses the same way, and the floor is not left set."""
    (tmp_path / "0001_m1.sql").write_text("CREATE TABLE sessions (id text)")
    await run_migrations(empty_db_dsn, tmp_path)
    conn = await asyncpg.connect(empty_db_dsn)  # an old replica, unnamed
    try:
        await conn.execute("INSERT INTO sessions VALUES ('old')")
        (tmp_path / "0002_m2.sql").write_text(f"{seen}CREATE TABLE b (y int);\n{sets}")
        with pytest.raises(MigrationError, match=r"^migration 0002_m2\.sql breaks .*\(to 0001"):
            await run_migrations(empty_db_dsn, tmp_path, serving=True)
        assert await conn.fetchval("SELECT to_regclass('b')") is None
        comment = "SELECT obj_description('schema_migrations'::regclass, 'pg_class')"
        assert await conn.fetchval(comment) is None
    finally:
        await conn.close()
    assert await run_migrations(empty_db_dsn, tmp_path, serving=True) == ["0002_m2.sql"]


async def test_a_floor_in_a_branch_that_does_not_run_sets_none(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """The floor is what the migration ran: one in a branch not taken is no floor, so serve
    applies the migration beside an unnamed client and the ledger says nothing."""
    (tmp_path / "0001_m1.sql").write_text("CREATE TABLE sessions (id text)")
    await run_migrations(empty_db_dsn, tmp_path)
    conn = await asyncpg.connect(empty_db_dsn)  # an old replica, unnamed
    try:
        await conn.execute("INSERT INTO sessions VALUES ('old')")
        (tmp_path / "0002_m2.sql").write_text(_BRANCHED.format("false"))
        assert await run_migrations(empty_db_dsn, tmp_path, serving=True) == ["0002_m2.sql"]
        comment = "SELECT obj_description('schema_migrations'::regclass, 'pg_class')"
        assert await conn.fetchval(comment) is None
    finally:
        await conn.close()


async def test_replicas_starting_together_apply_each_migration_once(empty_db_dsn: str) -> None:
    """Three starts at once on an empty database: the advisory lock serialises them, each
    migration is applied by exactly one (none stops before a breaking one: there are no
    sessions yet), and every start ends on the whole schema."""
    runs = await asyncio.gather(*(run_migrations(empty_db_dsn, serving=True) for _ in range(3)))
    files = sorted(p.name for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    assert sorted(name for run in runs for name in run) == files
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        ledger = await conn.fetch("SELECT name FROM schema_migrations ORDER BY version")
    finally:
        await conn.close()
    assert [r["name"] for r in ledger] == files
