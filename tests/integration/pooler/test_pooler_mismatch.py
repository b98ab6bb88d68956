"""A replica pointed at a transaction pooler without ``CASCADE_DB_POOLER=transaction`` says
so: at start (the lifespan, and ``cascade-proxy migrate``), one line naming the setting; a
statement of a request that meets it (a replica that started by luck) raises the same
error, which the API answers with its 503 and logs with that message.

The PgBouncer here lends its idle server connections in turn (``server_round_robin``), and
the test's database gets two of them first, so a client's consecutive transactions always
run on different servers: what a busy pooler does now and then, every time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from starlette.types import Message

from proxy.app import create_app
from proxy.settings import Settings
from proxy.store.db import GuardedConnection, PoolerMismatch, create_pool
from proxy.store.migrations import run_migrations
from tests.integration.pooler.conftest import own_pgbouncer
from tests.integration.pooler.pgbouncer import PgBouncer

SETTING = "set CASCADE_DB_POOLER=transaction, and DATABASE_LISTEN_URL"


@pytest.fixture
def round_robin(pg_dsn: str) -> Iterator[PgBouncer]:
    with own_pgbouncer(pg_dsn, round_robin=True) as bouncer:
        yield bouncer


@pytest.fixture
async def turning_dsn(round_robin: PgBouncer, db_dsn: str) -> str:
    """The test's database through ``round_robin``, which holds two idle servers for it."""
    dsn = round_robin.pooled(db_dsn)
    conns = [await asyncpg.connect(dsn, statement_cache_size=0) for _ in range(2)]
    try:
        for conn in conns:  # both in a transaction at once: two server connections
            await conn.execute("BEGIN")
        await asyncio.gather(*(conn.fetchval("SELECT 1") for conn in conns))
        for conn in conns:  # both back to the pooler's idle servers, not thrown away
            await conn.execute("COMMIT")
    finally:
        for conn in conns:
            await conn.close()
    return dsn


async def test_the_migrations_name_the_setting(turning_dsn: str) -> None:
    """``cascade-proxy migrate`` prints a DatabaseUnavailable as one line (proxy/cli_run.py)."""
    with pytest.raises(PoolerMismatch, match=SETTING) as caught:
        await run_migrations(turning_dsn)
    assert str(caught.value).startswith("DATABASE_URL looks like a transaction-mode pooler")
    assert caught.value.sqlstate in {"26000", "42P05"}


async def test_the_migrations_name_where_the_url_came_from(turning_dsn: str) -> None:
    """``cascade-proxy migrate --database-url``: the flag, not DATABASE_URL, gave the URL."""
    with pytest.raises(PoolerMismatch, match=SETTING) as caught:
        await run_migrations(turning_dsn, setting="--database-url")
    said = str(caught.value)
    assert said.startswith("--database-url looks like a transaction-mode pooler"), said
    assert "DATABASE_URL" not in said


@pytest.mark.parametrize("setting", ["DATABASE_URL", "--database-url"])
async def test_the_pool_names_the_setting(turning_dsn: str, setting: str) -> None:
    with pytest.raises(PoolerMismatch, match=SETTING) as caught:
        await create_pool(turning_dsn, min_size=1, max_size=1, setting=setting)
    assert str(caught.value).startswith(f"{setting} looks like a transaction-mode pooler")


async def test_a_request_statement_names_the_setting(turning_dsn: str) -> None:
    conn = await asyncpg.connect(turning_dsn, connection_class=GuardedConnection)
    try:
        with pytest.raises(PoolerMismatch, match=SETTING):
            for n in range(2):  # prepared on one server, bound on the next
                await conn.fetchval("SELECT $1::int", n)
    finally:
        await conn.close()


async def start(app: object) -> list[Message]:
    """Run ``app``'s lifespan start-up as uvicorn does; what it sent back."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    with pytest.raises(PoolerMismatch):
        await app(scope, receive, send)  # type: ignore[operator]
    return sent


async def test_a_replica_without_the_setting_refuses_to_start_naming_it(
    turning_dsn: str, config_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(Settings(database_url=turning_dsn, config=config_path, watch_config=False))
    with caplog.at_level(logging.ERROR):
        sent = await start(app)
    assert sent == [{"type": "lifespan.startup.failed", "message": ""}]  # no traceback
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.startswith("cannot start: DATABASE_URL looks like a transaction-mode pooler")
    assert SETTING in line and "\n" not in line


async def test_a_replica_given_the_url_by_the_flag_names_the_flag(
    turning_dsn: str, config_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(database_url=None, config=config_path, watch_config=False)
    app = create_app(settings.with_database_url(turning_dsn, "--database-url"))
    with caplog.at_level(logging.ERROR):
        await start(app)
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.startswith("cannot start: --database-url looks like a transaction-mode pooler")
    assert SETTING in line and "DATABASE_URL" not in line
