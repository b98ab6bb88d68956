"""Every proxy these tests start runs behind PgBouncer in transaction mode.

``DATABASE_URL`` is the test's database through PgBouncer, ``CASCADE_DB_POOLER=transaction``,
and ``DATABASE_LISTEN_URL`` the same database directly, as README (Deploying behind a pooler)
says to run it. The proxies are the integration tests' own (``ProxyServer``, whose settings
:data:`~tests.integration.api.conftest.ROUTES` rewrites here), so a test of
tests/integration/api imported into a module of this directory runs through the pooler as
it is. What a test reads back to check goes straight to the database (``db_dsn``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proxy.settings import Settings
from tests.integration.api.conftest import ROUTES, client, config_path, http, proxy, settings
from tests.integration.pooler.pgbouncer import PgBouncer, find_pgbouncer, start_pgbouncer

__all__ = ["client", "config_path", "http", "proxy", "settings"]  # the api tests' fixtures


NEEDS_LEASE = {
    "test_a_sessions_requests_are_serialised_across_replicas",
    "test_a_compaction_runs_once_for_both_replicas_and_is_counted_once",
}
"""Tests that need a session's requests, and its compactions, serialised by something
other than a session-level advisory lock: through a transaction pooler the lock and its
unlock can land on two server connections. Issue 24's row lease (branch ``lease``)
replaces the lock; until it is merged these may fail, and only through the pooler."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents and getattr(item, "originalname", "") in NEEDS_LEASE:
            item.add_marker(
                pytest.mark.xfail(
                    reason="needs issue 24's session row lease (branch lease): a session-level"
                    " advisory lock does not hold through a transaction pooler",
                    strict=False,
                )
            )


@pytest.fixture(scope="session")
def pgbouncer(pg_dsn: str) -> Iterator[PgBouncer]:
    binary = find_pgbouncer()
    if binary is None:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer; .ci/run does)")
    with start_pgbouncer(binary, pg_dsn) as bouncer:
        yield bouncer


@pytest.fixture
def pooled_dsn(pgbouncer: PgBouncer, db_dsn: str) -> str:
    """The test's database through PgBouncer."""
    return pgbouncer.pooled(db_dsn)


def behind(pgbouncer: PgBouncer) -> Callable[[Settings], Settings]:
    """Settings with the database behind ``pgbouncer``, LISTEN straight to it."""

    def route(settings: Settings) -> Settings:
        if not settings.database_url or settings.db_pooler == "transaction":
            return settings  # embedded, or already routed by the test itself
        return settings.model_copy(
            update={
                "database_url": pgbouncer.pooled(settings.database_url),
                "database_listen_url": settings.database_url,
                "db_pooler": "transaction",
            }
        )

    return route


@pytest.fixture(autouse=True)
def behind_pgbouncer(pgbouncer: PgBouncer) -> Iterator[None]:
    route = behind(pgbouncer)
    ROUTES.append(route)
    try:
        yield
    finally:
        ROUTES.remove(route)
