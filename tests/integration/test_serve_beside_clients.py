"""Which other clients of the database stop ``serve`` before a migration that breaks older
code: the ones that may be a replica of the release that migrated it (README: Upgrading)."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from proxy.store.db import APPLICATION_NAME, connect
from proxy.store.migrations import MigrationError, run_migrations
from tests.integration.test_migration_rollback import _at_0019_with_a_session


async def test_cascade_names_its_connections(empty_db_dsn: str) -> None:
    """A replica's connections say they are Cascade's in ``pg_stat_activity``; a URL that
    names them keeps its name."""
    for dsn, name in [
        (empty_db_dsn, APPLICATION_NAME),
        (empty_db_dsn + ("&" if "?" in empty_db_dsn else "?") + "application_name=blue", "blue"),
    ]:
        conn = await connect(dsn)
        try:
            assert await conn.fetchval("SHOW application_name") == name
        finally:
            await conn.close()


async def test_an_open_psql_does_not_stop_serve_but_an_unnamed_client_does(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """A ``psql`` left open beside a database a release at 0019 serves serves no chat, so
    ``serve`` applies 0020 beside it; a client with no name (a replica of a release that
    named none) or Cascade's name may be a replica of that release, and stops it, the
    refusal naming what it counted."""
    await _at_0019_with_a_session(empty_db_dsn, tmp_path)
    psql = await asyncpg.connect(empty_db_dsn, server_settings={"application_name": "psql"})
    user = await psql.fetchval("SELECT current_user")
    try:
        for settings, counted in [
            ({}, f"1 unnamed as {user}"),
            ({"application_name": APPLICATION_NAME}, f"1 {APPLICATION_NAME} as {user}"),
        ]:
            replica = await asyncpg.connect(empty_db_dsn, server_settings=settings)
            try:
                with pytest.raises(MigrationError) as refused:
                    await run_migrations(empty_db_dsn, serving=True)
            finally:
                await replica.close()
            assert f"(1 other connection to it: {counted})" in str(refused.value)
        assert (await run_migrations(empty_db_dsn, serving=True))[0] == "0020_begin_step_v5.sql"
    finally:
        await psql.close()
