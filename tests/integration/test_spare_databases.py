"""The per-test databases made ahead (``SpareDatabases`` in tests/integration/conftest.py):
each test gets a fresh, migrated copy of its own, and every copy is dropped in the end."""

from __future__ import annotations

from tests.integration.conftest import SpareDatabases, column, dsn_with_db


def _databases(pg_dsn: str) -> set[str]:
    return set(column(pg_dsn, "SELECT datname FROM pg_database WHERE datname LIKE 'spare\\_%'"))


def test_each_take_is_a_fresh_migrated_copy_and_all_are_dropped(
    pg_dsn: str, template_db: str
) -> None:
    before = _databases(pg_dsn)  # none: only this test makes them
    spares = SpareDatabases(pg_dsn, template_db, prefix="spare")
    try:
        first = spares.take()
        migrated = column(dsn_with_db(pg_dsn, first), "SELECT count(*) FROM schema_migrations")
        assert migrated == column(
            dsn_with_db(pg_dsn, template_db), "SELECT count(*) FROM schema_migrations"
        )
        assert migrated[0] > 0
        column(dsn_with_db(pg_dsn, first), "CREATE TABLE left_behind (n int)")
        spares.give_back(first)
        second = spares.take(quiet=True)  # the one made while ``first`` was out
        assert second != first
        tables = "SELECT count(*) FROM pg_tables WHERE tablename = 'left_behind'"
        assert column(dsn_with_db(pg_dsn, second), tables) == [0]
        assert _databases(pg_dsn) - before == {second}  # first dropped; nothing queued
        spares.give_back(second, quiet=True)
        assert len(_databases(pg_dsn) - before) == 1  # the next copy, made in the give-back
    finally:
        spares.close()
    assert _databases(pg_dsn) == before
