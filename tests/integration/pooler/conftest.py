"""Every proxy these tests start runs behind PgBouncer in transaction mode.

``DATABASE_URL`` is the test's database through PgBouncer, ``CASCADE_DB_POOLER=transaction``,
and ``DATABASE_LISTEN_URL`` the same database directly, as README (Behind a connection
pooler) says to run it. The proxies are the integration tests' own (``ProxyServer``, which
:func:`~tests.integration.pooler.pgbouncer.routed_through` reroutes), so a test of
tests/integration/api imported into a module of this directory runs through the pooler as
it is. ``CASCADE_TEST_POOLER=transaction`` does the same for every integration test.

The PgBouncer here lends its idle server connections in turn (``server_round_robin``):
a client's consecutive transactions then run on different server connections whenever the
database has two, so what leans on one server's session (a prepared statement, a ``SET``,
a session-level advisory lock, a temporary table) fails here rather than passing by luck.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.api.conftest import (
    admin,
    client,
    config_path,
    http,
    proxy,
    records,
    replicas,
    settings,
)
from tests.integration.pooler.pgbouncer import (
    PgBouncer,
    find_pgbouncer,
    routed_through,
    start_pgbouncer,
)

# the api tests' fixtures
__all__ = ["admin", "client", "config_path", "http", "proxy", "records", "replicas", "settings"]


@contextlib.contextmanager
def own_pgbouncer(direct_dsn: str, **options: Any) -> Iterator[PgBouncer]:
    """A PgBouncer in front of ``direct_dsn``'s server (``start_pgbouncer``'s ``options``),
    stopped at the end; the test is skipped where none is installed."""
    binary = find_pgbouncer()
    if binary is None:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer; .ci/run does)")
    with start_pgbouncer(binary, direct_dsn, **options) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def pgbouncer(pg_dsn: str) -> Iterator[PgBouncer]:
    """This directory's PgBouncer: transaction mode, server connections lent in turn."""
    with own_pgbouncer(pg_dsn, round_robin=True) as bouncer:
        yield bouncer


@pytest.fixture
def pooled_dsn(pgbouncer: PgBouncer, db_dsn: str) -> str:
    """The test's database through PgBouncer."""
    return pgbouncer.pooled(db_dsn)


@pytest.fixture(autouse=True)
def behind_pgbouncer(pgbouncer: PgBouncer) -> Iterator[None]:
    with routed_through(pgbouncer):
        yield
