"""The forward-only migration runner: ``migrations/NNNN_name.sql`` applied in order, each in
its own transaction, recorded with its checksum in ``schema_migrations``.

``cascade-proxy migrate`` runs it, and ``serve`` before it opens the pool: the pool's
connections register the pgvector codec, and the vector type exists only after 0001. A
transaction-scoped advisory lock serialises replicas that start together, and an applied
file whose checksum changed refuses the start (``shipped.py`` lists the earlier texts still
accepted). A release older than the schema serves it with a warning, unless a migration set
the ledger's floor past it (:data:`FLOOR`): then it refuses. A migration that waits long for
a table's lock gives way and is tried again, so the replicas serving meanwhile are not held
behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import sys
from pathlib import Path
from typing import Any

import asyncpg

from proxy.store.db import (
    DatabaseUnavailable,
    PoolerMismatch,
    connect,
    connection_lost,
)
from proxy.store.db_connect import replicas_named
from proxy.store.migration_clients import MIGRATOR, MigrationError, refuse_beside_older
from proxy.store.migration_sql import FLOOR, floor_in, floor_of
from proxy.store.shipped import shipped_earlier

__all__ = [
    "FLOOR",
    "MIGRATIONS_DIR",
    "MigrationError",
    "floor_of",
    "find_migrations",
    "run_migrations",
]

log = logging.getLogger("cascade")


def find_migrations(source: Path, prefix: Path) -> Path:
    """The migrations directory: the source tree's ``migrations/`` in a checkout or an
    editable install, else the copy a wheel installs under ``<prefix>/share/cascade-proxy/``
    (pyproject's data-files; ``pip install .`` in the Docker image)."""
    tree = source / "migrations"
    return tree if tree.is_dir() else prefix / "share" / "cascade-proxy" / "migrations"


MIGRATIONS_DIR = find_migrations(Path(__file__).resolve().parents[2], Path(sys.prefix))
_LOCK_KEY = 0x0CA5CADE  # advisory lock serialising migrations across replicas
LOCK_WAIT_SECONDS = 1.0
"""How long a migration's statement waits for a table's lock (``lock_timeout``) before the
migration gives way: while it waits, every request's statement on that table queues behind
it, so a long transaction holding the lock (a ``pg_dump``, a report) would stop them all."""
LOCK_RETRY_SECONDS = 2.0
"""The pause before a migration that gave way is tried again, in which requests go through."""

CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations(
    version int PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())
"""


def _files(directory: Path) -> list[tuple[int, str, str]]:
    out = []
    for path in sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        text = path.read_text(encoding="utf-8")
        out.append((int(path.name[:4]), path.name, text))
    if not out:  # never report "nothing pending" against a schema that was never created
        raise MigrationError(f"no migrations found in {directory}")
    return out


async def _floor(conn: asyncpg.Connection) -> int | None:
    """The ledger's floor (:data:`FLOOR`), if a migration set one."""
    comment = await conn.fetchval(
        "SELECT obj_description('schema_migrations'::regclass, 'pg_class')"
    )
    floor = FLOOR.search(comment or "")
    return int(floor[1]) if floor else None


async def _check_newer(conn: asyncpg.Connection, last: int, last_name: str) -> None:
    """Refuse, naming both versions, when the ledger's floor (:data:`FLOOR`) is past this
    release's last migration; else one warning when the ledger holds migrations past it: a
    newer release migrated the database (a rollback, or an old replica in a rolling upgrade).
    The warning is no refusal, which would stop the old replicas of a rollout as they
    restart on a schema still written to serve them."""
    newer = await conn.fetch(
        "SELECT name FROM schema_migrations WHERE version > $1 ORDER BY version", last
    )
    if not newer:
        return
    names = [r["name"] for r in newer]
    floor = await _floor(conn)
    if floor is not None and floor > last:
        raise MigrationError(
            f"the database's schema (migrated to {names[-1]}) is served only by a release"
            f" with migration {floor:04d} or later, and this release's last is {last_name}:"
            " run the newer release, or restore the backup taken before the upgrade"
            " (README: Upgrading)"
        )
    log.warning(
        "the database holds %d migrations this release does not have (%s): a newer"
        " release migrated it; run that release, since this one was not written for"
        " its schema (README: Upgrading)",
        len(names),
        ", ".join(names),
    )


async def run_migrations(
    dsn: str,
    directory: Path | None = None,
    *,
    setting: str = "DATABASE_URL",
    serving: bool = False,
    **connect_kwargs: Any,
) -> list[str]:
    """Apply pending migrations in order, each in its own transaction; return their names.

    Runs on a bare connection (before the codec-registering pool exists, because the vector
    type only exists after 0001). Each migration's transaction first takes a
    transaction-scoped advisory lock, so concurrent replicas serialise, and reads the ledger
    after it: a replica that waited finds the migration applied and skips it. Nothing
    outlives a transaction, so this works through a transaction-mode pooler too.
    ``setting`` names where ``dsn`` came from, for a refusal (unreachable, or a pooler).
    ``serving``: ``serve``'s start, which stops before a migration that breaks older code on
    a database holding sessions while other clients are connected
    (:func:`~proxy.store.migration_clients.refuse_beside_older`).
    """
    connect_kwargs.setdefault("server_settings", {"application_name": MIGRATOR})
    conn = await connect(dsn, setting=setting, **connect_kwargs)  # pooler_kwargs: behind a pooler
    # pooler_kwargs turns the statement cache off behind a transaction pooler, which hides
    # the replicas' connections; else they are named as the URL names them (or not at all)
    pooled = connect_kwargs.get("statement_cache_size") == 0
    replicas = None if pooled else replicas_named(dsn)
    applying = asyncio.ensure_future(_apply(conn, directory, setting, serving, replicas))
    try:
        return await asyncio.shield(applying)
    except asyncio.CancelledError:
        # A start interrupted: a statement that never answers (a paused pooler, a lost host)
        # would hold the rollback and the close as long, so the connection is dropped; the
        # server rolls back what it had begun. The pause before a migration is tried again
        # is cut too, not waited out.
        conn.terminate()
        applying.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(applying, 5)
        raise
    finally:
        if not conn.is_closed():
            await conn.close()


async def _take_turn(conn: asyncpg.Connection) -> None:
    """The advisory lock, in the transaction begun: waited for as long as another replica's
    migration runs, whatever ``lock_timeout`` or ``statement_timeout`` the database or the
    role sets by default (a guard for requests' statements, which would refuse the start and
    cut a slow migration at every try). What bounds a start is the deployment's."""
    await conn.execute("SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0")
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)


async def _apply(
    conn: asyncpg.Connection,
    directory: Path | None,
    setting: str,
    serving: bool,
    replicas: str | None,
) -> list[str]:
    """The migrations :func:`run_migrations` applies, on its connection."""
    applied: list[str] = []
    try:
        async with conn.transaction():
            await _take_turn(conn)
            await conn.execute(CREATE_LEDGER)
            beside = None  # the release that may serve the database, to serve's start
            if serving:
                beside = await conn.fetchrow(
                    "SELECT version, name FROM schema_migrations ORDER BY version DESC LIMIT 1"
                )
        files = _files(directory or MIGRATIONS_DIR)
        for version, name, text in files:
            if await _apply_one(conn, version, name, text, setting, beside, replicas):
                applied.append(name)
        await _check_newer(conn, files[-1][0], files[-1][1])
    except asyncpg.PostgresError as exc:
        _raise_if_lost(exc, setting)
        PoolerMismatch.raise_from(exc, setting)  # the first place a replica behind one fails
        raise MigrationError(  # a role that may not create tables: one line, no traceback
            f"the migrations' ledger (schema_migrations) cannot be made or read with the role"
            f" {setting} names: {type(exc).__name__}: {exc}"
        ) from exc
    except (OSError, asyncpg.InterfaceError, asyncpg.InternalClientError) as exc:
        # a lost socket, or asyncpg refusing a statement on the connection it closed
        _raise_if_lost(exc, setting, conn)
        raise
    return applied


def _raise_if_lost(exc: Exception, setting: str, conn: asyncpg.Connection | None = None) -> None:
    """Raise a :class:`DatabaseUnavailable` for ``exc`` when it means the server went away
    (a restart, a terminated backend, a lost socket): no fault of the role or of the
    migration, which a later run, once the server is back, applies (``migrate`` exits 3 for
    it, not 2)."""
    if connection_lost(exc, conn):
        raise DatabaseUnavailable(
            f"lost the connection to PostgreSQL ({setting}) while migrating: "
            f"{type(exc).__name__}: {exc}",
            getattr(exc, "sqlstate", None),
        ) from exc


async def _apply_one(
    conn: asyncpg.Connection,
    version: int,
    name: str,
    text: str,
    setting: str,
    beside: asyncpg.Record | None,
    replicas: str | None,
) -> bool:
    """Apply one migration unless the ledger has it; whether it was applied here. A statement
    that waits longer than :data:`LOCK_WAIT_SECONDS` for a table's lock rolls the migration
    back, and it is tried again after :data:`LOCK_RETRY_SECONDS` (a warning the first time).
    ``beside``: on ``serve``'s start, the ledger's newest migration before it, the release
    that may still serve the database
    (:func:`~proxy.store.migration_clients.refuse_beside_older`)."""
    checksum = hashlib.sha256(text.encode()).hexdigest()
    first = True
    while True:
        try:
            async with conn.transaction():
                await _take_turn(conn)
                done = await conn.fetchval(
                    "SELECT checksum FROM schema_migrations WHERE version = $1", version
                )
                if done is not None:
                    if done != checksum and not shipped_earlier(version, done):
                        raise MigrationError(
                            f"migration {name} was changed after it was applied; "
                            "add a new migration instead of editing an old one"
                        )
                    return False
                floor = floor_of(version, text)
                if beside is not None and floor is not None:
                    await refuse_beside_older(conn, name, floor, beside, replicas)
                # After the advisory lock: waiting for another replica's migration is no
                # table lock that requests queue behind.
                wait_ms = max(1, round(LOCK_WAIT_SECONDS * 1000))
                await conn.execute(f"SET LOCAL lock_timeout = {wait_ms}")
                # the server reads the migration's strings as the floor's reading does (a
                # backslash in '...' is itself), whatever the database or the role sets
                await conn.execute("SET LOCAL standard_conforming_strings = on")
                # a floor never goes down: a migration breaking only releases before an older
                # NNNN leaves the higher one a migration before it set, which still holds, and
                # SQL after the floor its text sets (clearing the comment) leaves that one
                held = max(await _floor(conn) or 0, floor_in(text) or 0) or None
                try:
                    await conn.execute(text)
                except asyncpg.LockNotAvailableError:
                    raise
                except asyncpg.PostgresError as exc:  # one line naming the file, no traceback
                    _raise_if_lost(exc, setting)
                    PoolerMismatch.raise_from(exc, setting)
                    raise MigrationError(
                        f"migration {name} failed: {type(exc).__name__}: {exc}"
                    ) from exc
                after = await _floor(conn)
                if beside is not None and after is not None and after not in (held, floor):
                    # a floor its text does not show (dynamic SQL, past one it shows): read
                    # from the ledger, the check is the same, and raising rolls it back
                    await refuse_beside_older(conn, name, after, beside, replicas)
                if held is not None and (after or 0) < held:
                    said = f"'cascade: serves from {held:04d}'"
                    await conn.execute(f"COMMENT ON TABLE schema_migrations IS {said}")
                await conn.execute(
                    "INSERT INTO schema_migrations(version, name, checksum) VALUES ($1, $2, $3)",
                    version,
                    name,
                    checksum,
                )
            return True
        except asyncpg.LockNotAvailableError:
            if first:
                log.warning(
                    "migration %s waits for a lock another session holds on a table it"
                    " changes (a long transaction: a pg_dump, a report's query); it gives way"
                    " after %g s each time, so requests go through, and tries again",
                    name,
                    LOCK_WAIT_SECONDS,
                )
            first = False
            await asyncio.sleep(LOCK_RETRY_SECONDS)
