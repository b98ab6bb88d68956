"""Which other clients of the database stop ``serve`` before a migration that breaks older
code: the ones that may be a replica of the release that migrated it (README: Upgrading)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from proxy.store.db import APPLICATION_NAME, connect
from proxy.store.migrations import MigrationError, run_migrations
from tests.integration.test_migration_rollback import _at_0019_with_a_session


async def test_cascade_names_its_connections(empty_db_dsn: str) -> None:
    """A replica's connections say they are Cascade's in ``pg_stat_activity``; a URL that
    names them keeps its name."""
    sep = "&" if "?" in empty_db_dsn else "?"
    for dsn, name in [
        (empty_db_dsn, APPLICATION_NAME),
        (empty_db_dsn + sep + "application_name=blue", "blue"),
        (empty_db_dsn + sep + "options=-c%20application_name%3Dgreen", "green"),
    ]:
        conn = await connect(dsn)
        try:
            assert await conn.fetchval("SHOW application_name") == name
        finally:
            await conn.close()


async def test_every_connection_a_running_replica_holds_is_named(empty_db_dsn: str) -> None:
    """The pool's and the listener's: a replica of this release never reads as unnamed, the
    name a release before it left."""
    app = create_app(Settings(database_url=empty_db_dsn, watch_config=False))
    seen = (
        "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname ="
        " current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        " GROUP BY 1"
    )
    async with app.router.lifespan_context(app):
        conn = await asyncpg.connect(empty_db_dsn, server_settings={"application_name": "t"})
        try:
            names = dict(await conn.fetch(seen))
        finally:
            await conn.close()
    assert set(names) == {APPLICATION_NAME} and names[APPLICATION_NAME] >= 2, names


async def test_an_open_psql_does_not_stop_serve_but_an_unnamed_client_does(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """A ``psql`` left open beside a database a release at 0019 serves serves no chat, so
    ``serve`` applies 0020 beside it; a client with no name (a replica of a release that
    named none) or Cascade's name may be a replica of that release, and stops it, the
    refusal naming what it counted."""
    await _at_0019_with_a_session(empty_db_dsn, tmp_path)
    psql = await _psql(empty_db_dsn)
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


class _Psql:
    """A ``psql`` session left open on the database (the binary, when installed: it names
    its connection itself), and a connection of the test's own to read with."""

    def __init__(self, proc: subprocess.Popen[bytes] | None, conn: asyncpg.Connection) -> None:
        self.proc, self.conn = proc, conn

    async def fetchval(self, sql: str) -> object:
        return await self.conn.fetchval(sql)

    async def close(self) -> None:
        if self.proc is not None:
            self.proc.communicate(b"\\q\n", timeout=10)
        await self.conn.close()


async def _psql(dsn: str) -> _Psql:
    binary = shutil.which("psql")
    if binary is None:  # a connection named as psql names it
        named = {"application_name": "psql"}
        return _Psql(None, await asyncpg.connect(dsn, server_settings=named))
    env = {k: v for k, v in os.environ.items() if k != "PGAPPNAME"}
    proc = subprocess.Popen([binary, "-X", "-q", "-w", dsn], stdin=subprocess.PIPE, env=env)
    conn = await asyncpg.connect(dsn, server_settings={"application_name": "psql"})
    seen = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'psql'"
    deadline = asyncio.get_running_loop().time() + 20
    while await conn.fetchval(seen) < 2:  # psql's own, beside this one
        assert proc.poll() is None, "psql exited"
        assert asyncio.get_running_loop().time() < deadline, "psql never connected"
        await asyncio.sleep(0.05)
    return _Psql(proc, conn)


_FLOOR = "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0002'"


async def _served_at_0001(dsn: str, tree: Path) -> None:
    """A database a release at 0001 migrated, holding a session; 0002 raises the floor."""
    (tree / "0001_m1.sql").write_text("CREATE TABLE sessions (id text)")
    await run_migrations(dsn, tree)
    (tree / "0002_m2.sql").write_text(f"CREATE TABLE b (y int);\n{_FLOOR};")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("INSERT INTO sessions VALUES ('old')")
    finally:
        await conn.close()


async def test_an_idle_unnamed_client_is_named_for_the_operator(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """An idle client with no name (a monitoring agent, or an old replica's idle pool
    connection: nothing tells them apart) stops serve, and the refusal names it by pid,
    address and start, with the way past it: ``migrate`` applies the migration beside it."""
    await _served_at_0001(empty_db_dsn, tmp_path)
    agent = await asyncpg.connect(empty_db_dsn)  # no application_name
    try:
        pid = await agent.fetchval("SELECT pg_backend_pid()")
        with pytest.raises(MigrationError) as refused:
            await run_migrations(empty_db_dsn, tmp_path, serving=True)
        said = str(refused.value)
        assert re.search(
            rf"; the clients counted: pid {pid} unnamed from \S.* since"
            r" \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(one that is no replica, a monitoring agent"
            r" or a pooler's health check, stops no `cascade-proxy migrate`",
            said,
        ), said
        assert "holding a lock" not in said
        assert await run_migrations(empty_db_dsn, tmp_path) == ["0002_m2.sql"]  # migrate
    finally:
        await agent.close()


async def test_an_unnamed_client_holding_a_cascade_table_is_said_to(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """An unnamed client in a transaction that read a Cascade table (an old replica's
    request) stops serve, the refusal saying which tables it holds, never its query's text
    (``pg_stat_activity.query``, which may hold a secret)."""
    await _served_at_0001(empty_db_dsn, tmp_path)
    replica = await asyncpg.connect(empty_db_dsn)
    try:
        async with replica.transaction():
            await replica.fetch("SELECT id, 'sk-r116-secret' FROM sessions")
            with pytest.raises(
                MigrationError, match=r"unnamed from .*, holding a lock on sessions"
            ) as refused:
                await run_migrations(empty_db_dsn, tmp_path, serving=True)
            assert "sk-r116" not in str(refused.value)
    finally:
        await replica.close()


async def test_a_named_client_holding_a_cascade_table_still_stops_serve(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """A name is no way past a client in a request: an old replica whose URL names its
    connections (``application_name=blue``) holding a lock on ``sessions`` stops serve."""
    await _served_at_0001(empty_db_dsn, tmp_path)
    replica = await asyncpg.connect(empty_db_dsn, server_settings={"application_name": "blue"})
    try:
        async with replica.transaction():
            await replica.fetch("SELECT id FROM sessions")
            with pytest.raises(MigrationError, match=r"pid \d+ blue from .*holding a lock on"):
                await run_migrations(empty_db_dsn, tmp_path, serving=True)
        assert await run_migrations(empty_db_dsn, tmp_path, serving=True) == ["0002_m2.sql"]
    finally:
        await replica.close()


def _as(dsn: str, role: str) -> str:
    parts = urlsplit(dsn)
    userinfo, _, hostport = parts.netloc.rpartition("@")
    password = "".join(userinfo.partition(":")[1:])
    return urlunsplit(parts._replace(netloc=f"{role}{password}@{hostport}"))


async def test_a_client_of_another_role_is_said_to_be_hidden_not_local(
    empty_db_dsn: str, tmp_path: Path
) -> None:
    """Cascade's role, no superuser, sees no address or start of another role's client (a
    monitoring agent's): the refusal says they are hidden, never a local socket or None."""
    role = f"cascade_owner_{os.getpid()}"
    admin = await asyncpg.connect(empty_db_dsn)  # unnamed, as another role
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN")
        await admin.execute(f"ALTER SCHEMA public OWNER TO {role}")
        owner = _as(empty_db_dsn, role)
        await _served_at_0001(owner, tmp_path)
        pid = await admin.fetchval("SELECT pg_backend_pid()")
        with pytest.raises(MigrationError) as refused:
            await run_migrations(owner, tmp_path, serving=True)
        said = str(refused.value)
        assert re.search(rf"pid {pid} unnamed as \w+, its address and start hidden", said), said
        assert "None" not in said and "a local socket" not in said, said
    finally:
        await admin.execute(f"DROP OWNED BY {role} CASCADE; DROP ROLE IF EXISTS {role}")
        await admin.close()


@pytest.mark.parametrize("names", ["application_name=blue", "options=-c%20application_name%3Dblue"])
async def test_a_url_naming_the_replicas_still_counts_an_idle_old_one(
    empty_db_dsn: str, tmp_path: Path, names: str
) -> None:
    """A deployment whose database URL names its connections (``blue``) is not past the check
    for good: serve with that URL counts an idle client so named (an old replica of the same
    deployment, same URL), and still no ``psql``."""
    await _served_at_0001(empty_db_dsn, tmp_path)
    dsn = empty_db_dsn + ("&" if "?" in empty_db_dsn else "?") + names
    psql = await _psql(empty_db_dsn)
    old = await connect(dsn)  # as an old replica's pool names its connection
    try:
        with pytest.raises(MigrationError, match=r"\(1 other connection to it: 1 blue as "):
            await run_migrations(dsn, tmp_path, serving=True)
    finally:
        await old.close()
    try:
        assert await run_migrations(dsn, tmp_path, serving=True) == ["0002_m2.sql"]
    finally:
        await psql.close()
