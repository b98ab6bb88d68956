"""The bus's listener at start: a URL that can never work refuses at once, the rest retries.

A wrong password, an unknown role or database is answered the same on every try, so the start
says so at once (naming the setting, the password masked) instead of after the 30 s that a
database still starting is given. A refused port, ``too many connections`` or a server still
starting can heal, and are retried for the whole window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from proxy.bus import EventBus
from proxy.store.db import DatabaseUnavailable
from tests.integration.conftest import dsn_with_db

WINDOW = 20.0
"""A retry window the fast refusals must end well within."""


def _with_user(dsn: str, user: str) -> str:
    parts = urlsplit(dsn)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    _, colon, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=f"{user}{colon}{password}{at}{hostport}"))


class FakePostgres:
    """A server on 127.0.0.1 that answers every startup with one ErrorResponse."""

    def __init__(self, sqlstate: str, message: str) -> None:
        self.sqlstate, self.message = sqlstate, message
        self.attempts = 0

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.attempts += 1
        try:
            length = int.from_bytes(await reader.readexactly(4), "big")
            await reader.readexactly(length - 4)  # the StartupMessage (sslmode=disable)
            fields = b"".join(
                tag + value.encode() + b"\0"
                for tag, value in (
                    (b"S", "FATAL"),
                    (b"V", "FATAL"),
                    (b"C", self.sqlstate),
                    (b"M", self.message),
                )
            )
            fields += b"\0"
            writer.write(b"E" + (len(fields) + 4).to_bytes(4, "big") + fields)
            await writer.drain()
        finally:
            writer.close()

    @classmethod
    @contextlib.asynccontextmanager
    async def serving(cls, sqlstate: str, message: str) -> AsyncIterator[tuple[FakePostgres, str]]:
        fake = cls(sqlstate, message)
        server = await asyncio.start_server(fake._answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield fake, f"postgresql://cascade:hunter2@127.0.0.1:{port}/cascade?sslmode=disable"
        finally:
            server.close()
            await server.wait_closed()


async def _refusal(url: str, timeout: float = WINDOW) -> tuple[str, float]:
    bus = EventBus(cast(Any, None), url, "DATABASE_LISTEN_URL")
    began = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as refused:
        await bus.start(timeout=timeout)
    elapsed = time.monotonic() - began
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("cascade-bus")]
    return str(refused.value), elapsed


async def test_a_wrong_password_refuses_at_once_naming_the_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="cascade.bus"):
        async with FakePostgres.serving(
            "28P01", 'password authentication failed for user "cascade"'
        ) as (fake, url):
            message, elapsed = await _refusal(url)
    assert elapsed < 5 and fake.attempts == 1
    port = urlsplit(url).port
    where = f"postgresql://cascade:***@127.0.0.1:{port}/cascade?sslmode=disable"
    assert message == (
        f"the event bus cannot LISTEN at {where} (DATABASE_LISTEN_URL): InvalidPasswordError: "
        'password authentication failed for user "cascade"'
    )
    assert "hunter2" not in message + caplog.text
    assert not caplog.records  # no "retrying" for what no retry can fix


@pytest.mark.parametrize(
    ("sqlstate", "reason"),
    [
        ("53300", "sorry, too many clients already"),
        ("57P03", "the database system is starting up"),
    ],
)
async def test_what_can_heal_is_retried_for_the_whole_window(
    sqlstate: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="cascade.bus"):
        async with FakePostgres.serving(sqlstate, reason) as (fake, url):
            message, elapsed = await _refusal(url, timeout=2.5)
    assert elapsed >= 2.5 and fake.attempts >= 2
    assert "no connection within 2.5 s" in message and reason in message
    retries = [r.getMessage() for r in caplog.records if r.name == "cascade.bus"]
    assert len(retries) >= 2 and all("retrying in 1s" in m for m in retries)


async def test_a_refused_port_is_retried_for_the_whole_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = "postgresql://cascade:hunter2@127.0.0.1:1/cascade"  # nothing listens on port 1
    with caplog.at_level(logging.WARNING, logger="cascade.bus"):
        message, elapsed = await _refusal(url, timeout=2.5)
    assert elapsed >= 2.5
    assert "no connection within 2.5 s" in message and "ConnectionRefusedError" in message
    assert len([r for r in caplog.records if "retrying in 1s" in r.getMessage()]) >= 2


async def test_an_unknown_database_or_role_refuses_at_once(db_dsn: str) -> None:
    """Against the real server: each is refused by PostgreSQL whatever the auth method."""
    for url, reason in (
        (dsn_with_db(db_dsn, "no_such_db"), 'InvalidCatalogNameError: database "no_such_db"'),
        (_with_user(db_dsn, "no_such_role"), 'role "no_such_role" does not exist'),
    ):
        message, elapsed = await _refusal(url)
        assert elapsed < 5, message
        assert reason in message and "(DATABASE_LISTEN_URL)" in message


async def test_a_good_url_still_listens(db_dsn: str) -> None:
    bus = EventBus(cast(Any, None), db_dsn)
    await bus.start(timeout=WINDOW)
    try:
        conn = await asyncpg.connect(db_dsn)
        try:
            listening = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
            )
        finally:
            await conn.close()
        assert listening == 1
    finally:
        await bus.stop()
