"""``CASCADE_DB_POOLER`` and ``DATABASE_LISTEN_URL``: what the pool's connections and the
event bus's listener are opened with (tests/integration/pooler runs them through PgBouncer)."""

from __future__ import annotations

import logging

import pytest

from proxy.app import listen_dsn
from proxy.settings import Settings
from proxy.store.db import pooler_kwargs

POOLED = "postgresql://cascade@pgbouncer:6432/cascade"
DIRECT = "postgresql://cascade@db:5432/cascade"


def test_a_transaction_pooler_turns_the_statement_cache_off() -> None:
    assert pooler_kwargs("transaction") == {"statement_cache_size": 0}
    assert pooler_kwargs("none") == {}  # asyncpg's own default cache


def test_the_bus_listens_on_the_listen_url_when_one_is_set() -> None:
    settings = Settings(database_url=POOLED, database_listen_url=DIRECT, db_pooler="transaction")
    assert listen_dsn(settings, POOLED) == DIRECT


def test_without_one_it_listens_on_the_database_url(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cascade"):
        assert listen_dsn(Settings(database_url=DIRECT, database_listen_url=None), DIRECT) == DIRECT
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="cascade"):
        pooled = Settings(database_url=POOLED, database_listen_url=None, db_pooler="transaction")
        assert listen_dsn(pooled, POOLED) == POOLED
    assert "without DATABASE_LISTEN_URL" in caplog.text


def test_the_embedded_database_ignores_a_listen_url() -> None:
    """The embedded server is started here, so a listen URL can only name another one."""
    settings = Settings(database_url=None, database_listen_url=DIRECT)
    assert listen_dsn(settings, "postgresql://postgres:@/postgres?host=/tmp/x") != DIRECT
