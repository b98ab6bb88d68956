"""``CASCADE_DB_POOLER`` and ``DATABASE_LISTEN_URL``: what the pool's connections and the
event bus's listener are opened with (tests/integration/pooler runs them through PgBouncer)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import asyncpg
import pytest

from proxy.bus import EventBus, listen_url
from proxy.bus_listen import through_pooler
from proxy.settings import Settings
from proxy.store.db import DatabaseUnavailable, create_pool, pooler_kwargs
from proxy.store.pooler import unnamed_pooler

POOLED = "postgresql://cascade@pgbouncer:6432/cascade"
DIRECT = "postgresql://cascade@db:5432/cascade"


def test_a_transaction_pooler_turns_the_statement_cache_off() -> None:
    assert pooler_kwargs("transaction") == {"statement_cache_size": 0}
    assert pooler_kwargs("none") == {}  # asyncpg's own default cache


def test_the_bus_listens_on_the_listen_url_when_one_is_set() -> None:
    settings = Settings(database_url=POOLED, database_listen_url=DIRECT, db_pooler="transaction")
    assert listen_url(settings, POOLED) == (DIRECT, "DATABASE_LISTEN_URL")


def test_without_one_it_listens_on_the_database_url(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cascade"):
        direct = Settings(database_url=DIRECT, database_listen_url=None)
        assert listen_url(direct, DIRECT) == (DIRECT, "DATABASE_URL")
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="cascade"):
        pooled = Settings(database_url=POOLED, database_listen_url=None, db_pooler="transaction")
        assert listen_url(pooled, POOLED) == (POOLED, "DATABASE_URL")
    assert "without DATABASE_LISTEN_URL" in caplog.text


@pytest.mark.parametrize(
    "listen",
    [
        POOLED,
        "postgresql://cascade:pw-31@pgbouncer:6432/other",  # same pooler, another database
        "postgresql://cascade@PgBouncer:6432/cascade?sslmode=require",
    ],
)
def test_a_listen_url_through_the_same_pooler_is_warned_of(
    listen: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A listen URL copied from ``DATABASE_URL`` LISTENs through the pooler, where no
    notification reaches it: the start warns as it does without one, rather than the streams
    going without live events unsaid."""
    settings = Settings(database_url=POOLED, database_listen_url=listen, db_pooler="transaction")
    with caplog.at_level(logging.WARNING, logger="cascade"):
        assert listen_url(settings, POOLED) == (listen, "DATABASE_LISTEN_URL")
    (record,) = caplog.records
    assert "DATABASE_LISTEN_URL reaches PostgreSQL through the pooler" in record.getMessage()
    assert "pw-31" not in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cascade"):  # another host, another port
        for other in (DIRECT, "postgresql://cascade@pgbouncer:5432/cascade"):
            direct = Settings(
                database_url=POOLED, database_listen_url=other, db_pooler="transaction"
            )
            listen_url(direct, POOLED)
    assert not caplog.records


def test_the_embedded_database_ignores_a_listen_url() -> None:
    """The embedded server is started here, so a listen URL can only name another one."""
    settings = Settings(database_url=None, database_listen_url=DIRECT)
    embedded = "postgresql://postgres:@/postgres?host=/tmp/x"
    assert listen_url(settings, embedded) == (embedded, "the embedded server")


async def test_a_listener_that_cannot_connect_names_its_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each retry says which URL the bus LISTENs at and which setting gave it, the password
    masked; after the start's wait, one error that says the same (a refusal to start,
    proxy/refusals.py), with the bus's tasks stopped."""
    url = "postgresql://cascade:hunter2@127.0.0.1:1/cascade"  # nothing listens on port 1
    bus = EventBus(cast(Any, None), url, "DATABASE_LISTEN_URL")
    where = "postgresql://cascade:***@127.0.0.1:1/cascade (DATABASE_LISTEN_URL)"
    with (
        caplog.at_level(logging.WARNING, logger="cascade.bus"),
        pytest.raises(DatabaseUnavailable) as refused,
    ):
        await bus.start(timeout=1.5)
    message = str(refused.value)
    assert message.startswith(f"the event bus cannot LISTEN at {where}: no connection within")
    assert "ConnectionRefusedError" in message and "\n" not in message
    retries = [r.getMessage() for r in caplog.records if r.name == "cascade.bus"]
    assert retries and all(f"event listener at {where} failed" in m for m in retries)
    assert "hunter2" not in caplog.text + message
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("cascade-bus")]


@pytest.mark.parametrize("setting", ["--database-url", "the embedded server"])
async def test_the_pools_connections_name_where_the_url_came_from(setting: str) -> None:
    """The pool opens its connections through ``connect``, whose refusal (an outage's log
    line under a running proxy) said DATABASE_URL when the flag or the embedded server gave
    the URL."""
    with pytest.raises(DatabaseUnavailable) as refused:
        await create_pool("postgresql://u:hunter2@127.0.0.1:1/x", setting=setting)
    said = str(refused.value)
    assert f"postgresql://u:***@127.0.0.1:1/x ({setting}): " in said, said
    assert "DATABASE_URL" not in said


def test_the_pooler_message_names_where_the_url_came_from() -> None:
    lost = asyncpg.exceptions.InvalidSQLStatementNameError('prepared statement "s" does not exist')
    flag = unnamed_pooler(lost, "--database-url")
    assert flag is not None and flag.startswith("--database-url looks like a transaction-mode")
    assert "DATABASE_URL" not in flag  # DATABASE_LISTEN_URL, the advice, is another name
    env = unnamed_pooler(lost, "DATABASE_URL")
    assert env is not None and env.startswith("DATABASE_URL looks like a transaction-mode")
    # A request's statement, whose connection does not know where its URL came from.
    served = unnamed_pooler(lost)
    assert served is not None and served.startswith("The database URL looks like a transaction")
    assert unnamed_pooler(asyncpg.exceptions.UniqueViolationError("dup"), "DATABASE_URL") is None


@pytest.mark.parametrize(
    ("pooler", "listen", "through"),
    [
        ("transaction", None, True),  # the bus LISTENs on DATABASE_URL, the pooler
        ("transaction", POOLED, True),  # a listen URL copied from DATABASE_URL
        ("transaction", DIRECT, False),
        ("none", None, False),
    ],
)
def test_the_bus_is_told_when_its_listen_url_goes_through_the_pooler(
    pooler: Any, listen: str | None, through: bool
) -> None:
    """There its probe is no LISTEN, which would leave each server the pooler lends listening."""
    settings = Settings(database_url=POOLED, database_listen_url=listen, db_pooler=pooler)
    assert through_pooler(settings, listen_url(settings, POOLED)[0]) is through
