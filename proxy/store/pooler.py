"""What stands between the proxy and PostgreSQL (``CASCADE_DB_POOLER``), and how a
transaction-mode pooler the setting does not name shows itself."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import asyncpg

__all__ = ["Pooler", "pooler_kwargs", "unnamed_pooler"]

Pooler: TypeAlias = Literal["none", "transaction"]
"""What stands between the proxy and PostgreSQL (``CASCADE_DB_POOLER``)."""


def pooler_kwargs(pooler: Pooler) -> dict[str, Any]:
    """The ``asyncpg.connect`` arguments a connection through ``pooler`` needs.

    Behind a transaction-mode pooler (PgBouncer's ``pool_mode = transaction``, RDS Proxy,
    Supabase's pooler) consecutive transactions of one client connection run on whichever
    server connection is free. asyncpg's statement cache prepares named statements on the
    server and reuses them on later statements: the next server either lacks the statement
    or already holds one of that name from another client. With the cache off asyncpg
    prepares each statement unnamed, within the statement's own exchange. The rest of what
    Cascade keeps per connection stays on the client: the JSON and vector codecs
    (``_init_connection``) look their types up once per connection, and every server has the
    same ones; its ``set_config`` calls are transaction-local.
    """
    return {"statement_cache_size": 0} if pooler == "transaction" else {}


# invalid_sql_statement_name, duplicate_prepared_statement. Cascade runs no PREPARE, EXECUTE
# or DEALLOCATE of its own: only asyncpg's named statements meet these, when a pooler lent
# the next transaction a server connection other than the one that prepared them.
_NAMED_STATEMENT_STATES = frozenset({"26000", "42P05"})


def unnamed_pooler(exc: BaseException, setting: str | None = None) -> str | None:
    """When ``exc`` says a named prepared statement was missing from the server connection,
    or already there, what to set instead; else None. asyncpg's own hint names its
    ``statement_cache_size``, which a deployment sets through ``CASCADE_DB_POOLER``.
    ``setting`` names where the URL came from (``DATABASE_URL``, ``--database-url``), which
    start-up knows; without it (a request's statement, on a connection that does not know)
    the message says the database URL."""
    if not isinstance(exc, asyncpg.PostgresError) or exc.sqlstate not in _NAMED_STATEMENT_STATES:
        return None
    return (
        f"{setting or 'The database URL'} looks like a transaction-mode pooler (PgBouncer's "
        "pool_mode = transaction, RDS Proxy, Supabase's pooler): a prepared statement did not "
        f"outlive its transaction ({type(exc).__name__}: {exc.args[0] if exc.args else exc}); set "
        "CASCADE_DB_POOLER=transaction, and DATABASE_LISTEN_URL to a URL that reaches "
        "PostgreSQL directly (README, Behind a connection pooler)"
    )
