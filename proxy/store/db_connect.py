"""Opening one connection: Cascade's name on it (``application_name``), and a failure to
connect raised as the refusal an operator can act on, naming the setting the URL came from
(an unreadable URL, a server that refuses TLS, or a database not there: its 503)."""

from __future__ import annotations

import re
import urllib.parse
from types import TracebackType
from typing import Any

import asyncpg

from proxy.store.db_errors import DatabaseUnavailable, TlsRefused, UnreadableUrl
from proxy.store.dsn import redact_dsn

__all__ = ["APPLICATION_NAME", "connect", "named", "replicas_named"]


APPLICATION_NAME = "cascade-proxy"
"""The ``application_name`` of Cascade's connections (a setting of their own, the runner's
``cascade-proxy migrations``, begins with it): what tells a replica's connections in
``pg_stat_activity`` from a ``psql``'s (README: Upgrading)."""


_OPTION = re.compile(r"(?:-c\s*|--)application_name=(\S*)")


def _query(dsn: str | None) -> dict[str, list[str]]:
    try:
        return urllib.parse.parse_qs(urllib.parse.urlsplit(dsn or "").query, True)
    except ValueError:  # a URL asyncpg refuses, in words of its own
        return {}


def named(dsn: str | None, settings: dict[str, str] | None = None) -> dict[str, str]:
    """``settings`` (a connection's ``server_settings``) with :data:`APPLICATION_NAME`, unless
    they or the URL name the connection (``application_name``, or ``options``' ``-c``): the
    operator's name is kept, as PostgreSQL would let ours override it."""
    query = _query(dsn)
    if "application_name" in query or any(
        "application_name" in o for o in query.get("options", [])
    ):
        return settings or {}
    return {"application_name": APPLICATION_NAME} | (settings or {})


def replicas_named(dsn: str | None) -> str:
    """The ``application_name`` of the pool's connections a replica serving with ``dsn``
    opens: the URL's own, else :data:`APPLICATION_NAME`. An old replica of a deployment whose
    URL names them is seen by it (README: Upgrading)."""
    query = _query(dsn)
    said = query.get("application_name", [])
    said += [m[1] for o in query.get("options", []) for m in _OPTION.finditer(o)]
    return said[-1] if said else APPLICATION_NAME


async def connect(
    dsn: str | None = None, *args: Any, setting: str = "DATABASE_URL", **kwargs: Any
) -> asyncpg.Connection:
    """asyncpg.connect; a failure is a DatabaseUnavailable, whose message names ``setting``,
    where ``dsn`` came from. The pool opens its connections through it too, so a request
    that finds the database gone can be told so (a 503). ``dsn`` may be None, as the pool's
    connect callback allows: libpq's PG* defaults apply."""
    kwargs["server_settings"] = named(dsn, kwargs.get("server_settings"))
    try:
        return await asyncpg.connect(dsn, *args, **kwargs)
    except (
        TimeoutError,
        OSError,
        ValueError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
    ) as exc:
        reason = redact_dsn(f"{type(exc).__name__}: {exc}", dsn)
        if isinstance(exc, TimeoutError) and not str(exc):  # asyncpg's says nothing
            reason = f"TimeoutError: no answer within {kwargs.get('timeout', 60):g} s"
        where = redact_dsn(dsn) if dsn is not None else "the PG* defaults"
        # asyncpg's ClientConfigurationError is a ValueError; a certificate file that does not
        # load is an OSError raised while it reads the URL, before any server is asked
        unread = isinstance(exc, ValueError) or _reading_url(exc.__traceback__)
        refused = isinstance(exc, ConnectionError) and "rejected SSL upgrade" in str(exc)
        kind = UnreadableUrl if unread else TlsRefused if refused else DatabaseUnavailable
        raise kind(
            f"cannot connect to PostgreSQL at {where} ({setting}): {reason}",
            getattr(exc, "sqlstate", None),
        ) from None


def _reading_url(tb: TracebackType | None) -> bool:
    """Whether the traceback ``tb`` passes through asyncpg's reading of the connection's
    settings (the URL and the files it names), where an error is a setting to mend: the
    same FileNotFoundError is a Unix socket not there yet when it is raised connecting."""
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "_parse_connect_arguments":
            return True
        tb = tb.tb_next
    return False
