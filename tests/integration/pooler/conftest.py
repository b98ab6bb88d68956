"""Every proxy these tests start runs behind PgBouncer in transaction mode.

``DATABASE_URL`` is the test's database through PgBouncer, ``CASCADE_DB_POOLER=transaction``,
and ``DATABASE_LISTEN_URL`` the same database directly, as README (Behind a connection
pooler) says to run it. The proxies are the integration tests' own (``ProxyServer``, which
:func:`~tests.integration.pooler.pgbouncer.routed_through` reroutes), so a test of
tests/integration/api imported into a module of this directory runs through the pooler as
it is. ``CASCADE_TEST_POOLER=transaction`` does the same for every integration test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.api.conftest import client, config_path, http, proxy, settings
from tests.integration.pooler.pgbouncer import PgBouncer, routed_through

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


@pytest.fixture
def pooled_dsn(pgbouncer: PgBouncer, db_dsn: str) -> str:
    """The test's database through PgBouncer."""
    return pgbouncer.pooled(db_dsn)


@pytest.fixture(autouse=True)
def behind_pgbouncer(pgbouncer: PgBouncer) -> Iterator[None]:
    with routed_through(pgbouncer):
        yield
