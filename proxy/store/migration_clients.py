"""Which other clients of the database stop ``serve`` before a migration that breaks the
release that migrated it, and the refusal that names them (README: Upgrading).

A running replica holds its pool's connections and its listener's, named
:data:`~proxy.store.db.APPLICATION_NAME` (or a name beginning with it), or unnamed in a
release before it named them. A client naming itself otherwise (``psql``, pgAdmin, a
monitoring agent) serves no chat and is no reason to stop, unless it holds a lock on one of
Cascade's tables: a request in flight, whatever the client is named (an old replica whose
URL names its connections). The refusal names each client it counted, never the text of its
query, which may hold a secret.
"""

from __future__ import annotations

import asyncpg

from proxy.store.db_connect import APPLICATION_NAME

__all__ = ["MIGRATOR", "MigrationError", "refuse_beside_older"]


class MigrationError(RuntimeError):
    """The migrations cannot be applied: none were found, an applied file changed, or a
    migration's SQL failed (its transaction rolled back; the message names the file)."""


MIGRATOR = "cascade-proxy migrations"
"""The ``application_name`` of the runner's connection: a replica starting beside this one,
waiting for its turn, is no replica serving."""

_OTHERS = """
SELECT a.application_name, a.usename, a.pid,
  CASE a.client_port WHEN -1 THEN 'a local socket' ELSE host(a.client_addr) END AS addr,
  to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"') AS since,
  held.locks
FROM pg_stat_activity a CROSS JOIN LATERAL (
  SELECT string_agg(DISTINCT c.relname, ', ') AS locks FROM pg_locks l JOIN pg_class c
    ON c.oid = l.relation AND c.relkind IN ('r', 'p')
    AND c.relnamespace = (SELECT relnamespace FROM pg_class
                          WHERE oid = 'schema_migrations'::regclass)
  WHERE l.pid = a.pid) held
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.usesysid IS NOT NULL
  AND coalesce(a.backend_type, 'client backend') = 'client backend'
  AND a.application_name IS DISTINCT FROM $1
  AND (coalesce(a.application_name, '') = '' OR a.application_name LIKE $2 || '%'
       OR a.application_name = $3 OR held.locks IS NOT NULL)
ORDER BY a.application_name, a.usename, a.backend_start
"""
"""Other clients of this database that may be a replica serving it (module docstring; another
role's backend type reads as null, and its address and start too, to a role without
``pg_read_all_stats``). An unnamed one counts idle too: an old replica's idle pool connection
looks like an unnamed monitoring agent's; the refusal names each (:func:`_which`) for the
operator, who stops it, names it, or runs ``migrate``."""
_NAMED_AT_MOST = 5  # clients the refusal names one by one; the rest are counted


def _seen(others: list[asyncpg.Record]) -> str:
    """The clients :data:`_OTHERS` counts, for the refusal: how many, by name and role."""
    names: dict[str, int] = {}
    for row in others:
        name = f"{row['application_name'] or 'unnamed'} as {row['usename']}"
        names[name] = names.get(name, 0) + 1
    said = ", ".join(f"{n} {name}" for name, n in names.items())
    return f"{len(others)} other connection{'s' if len(others) > 1 else ''} to it: {said}"


def _which(others: list[asyncpg.Record]) -> str:
    """Each client :data:`_OTHERS` counts, so the operator finds the ones that are no
    replica: its pid, address, start and the Cascade tables it holds a lock on. Another
    role's address and start, which this role may not see, are said to be hidden."""
    each = []
    for row in others[:_NAMED_AT_MOST]:
        locks = f", holding a lock on {row['locks']}" if row["locks"] else ""
        name = row["application_name"] or "unnamed"
        if row["since"] is None:
            where = f"as {row['usename']}, its address and start hidden from this role"
        else:
            where = f"from {row['addr']} since {row['since']}"
        each.append(f"pid {row['pid']} {name} {where}{locks}")
    more = len(others) - len(each)
    return "; ".join(each) + (f"; and {more} more" if more else "")


async def refuse_beside_older(
    conn: asyncpg.Connection,
    name: str,
    floor: int,
    beside: asyncpg.Record,
    replicas: str | None,
) -> None:
    """Refuse ``serve``'s start before a migration whose floor is past the release that
    migrated this database (``beside``, the ledger's newest before this start: what this
    start applied serves that release too), when it holds sessions and other clients are
    connected to it: that release's replicas may still serve them, and would fail every chat
    from the migration on. With no other client (the one replica restarted on the new
    release, ``make run``, Compose recreating the container) or no session (a fresh
    deployment, its replicas starting together) it is migrated as ever; ``cascade-proxy
    migrate`` always is. ``replicas``: the name this deployment's replicas give their
    connections (the database URL's, or :data:`~proxy.store.db.APPLICATION_NAME`); None
    behind a transaction pooler, where the other clients are not seen, and a database
    holding sessions is enough."""
    if beside["version"] >= floor:
        return
    if await conn.fetchval("SELECT to_regclass('sessions')") is None:
        return
    if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM sessions)"):
        return
    which = ""
    if replicas is None:  # an idle client of a transaction pooler holds no server connection
        seen = "behind a transaction pooler, which hides them"
    elif others := await conn.fetch(_OTHERS, MIGRATOR, APPLICATION_NAME, replicas):
        seen = _seen(others)
        which = (
            f"; the clients counted: {_which(others)} (one that is no replica, a monitoring"
            " agent or a pooler's health check, stops no `cascade-proxy migrate`, and no"
            " serve once it names itself: application_name in its connection settings)"
        )
    else:
        return
    raise MigrationError(
        f"migration {name} breaks the release that migrated this database (to"
        f" {beside['name']}), whose replicas may still serve its sessions ({seen}), so serve"
        " does not apply it: stop every replica of that release, run `cascade-proxy migrate`"
        f" with this one, then start it (README: Upgrading){which}"
    )
