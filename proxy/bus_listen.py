"""Where the event bus LISTENs (:func:`listen_url`), and the warnings a listen URL that can
hear nothing deserves: behind a transaction-mode pooler a LISTEN must reach PostgreSQL
directly (README, Behind a connection pooler). ``proxy.bus`` uses it at start, :func:`listen`
each time it LISTENs, :func:`until_lost` to wait, probing, until it loses it, :func:`end_silent`
once it listens again after dropping a listener gone silent, and :class:`Losses` to say that
it lost its listener and listens again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg

from proxy.settings import Settings

__all__ = [
    "NEVER_HEALS",
    "RELISTEN_EVERY",
    "STEADY_AFTER",
    "Losses",
    "end_silent",
    "listen",
    "listen_url",
    "through_pooler",
    "until_lost",
]

log = logging.getLogger("cascade.bus")

NEVER_HEALS = frozenset({"28P01", "28000", "3D000", "42501"})
"""SQLSTATEs that no retry can change: a wrong password (invalid_password), an unknown role or
one refused by pg_hba.conf (invalid_authorization_specification), an unknown database
(invalid_catalog_name), no CONNECT privilege (insufficient_privilege). A start that meets one
refuses at once; anything else (a refused port, a timeout, ``too many connections``, a server
still starting) is retried until ``bus.START_TIMEOUT``. A URL asyncpg cannot read (a
``ValueError``, its ``ClientConfigurationError`` among them) refuses at once too."""


def _endpoint(url: str) -> tuple[str, int] | None:
    """The server a ``postgresql://`` URL connects to: host (or socket directory, from a
    ``host=`` parameter too) and port; None for a URL that does not parse."""
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        host = (query.get("host") or [parts.hostname or "localhost"])[0].lower()
        port = (query.get("port") or [""])[0]
        return host, int(port) if port else parts.port or 5432
    except ValueError:
        return None


def listen_url(settings: Settings, dsn: str) -> tuple[str, str]:
    """Where the bus LISTENs, and the setting that says so: ``DATABASE_LISTEN_URL`` when it
    is set beside a ``DATABASE_URL``, else ``dsn``, the pool's own database. Behind a
    transaction pooler without it a LISTEN reaches no client: persisted events then come
    only through the streams' catch-up reads (``api/events.py``) and transient ones not at
    all, which start-up says; so it does of a listen URL at the pooler's own host and port
    (one copied from ``DATABASE_URL``), whose LISTEN succeeds and then hears nothing."""
    if settings.database_url and settings.database_listen_url:
        listen = settings.database_listen_url
        pooler = _endpoint(settings.database_url)
        if settings.db_pooler == "transaction" and pooler and _endpoint(listen) == pooler:
            log.warning(
                "DATABASE_LISTEN_URL reaches PostgreSQL through the pooler (%s:%s, as"
                " DATABASE_URL does), which cannot carry a LISTEN: no notification would reach"
                " the event bus; set it to a URL that reaches PostgreSQL directly (README,"
                " Behind a connection pooler)",
                *pooler,
            )
        return listen, "DATABASE_LISTEN_URL"
    if settings.db_pooler == "transaction":
        log.warning(
            "CASCADE_DB_POOLER=transaction without DATABASE_LISTEN_URL: the event bus LISTENs"
            " through the pooler, which cannot carry it; set DATABASE_LISTEN_URL to a URL"
            " that reaches PostgreSQL directly (README, Behind a connection pooler)"
        )
    return dsn, settings.database_source()


def through_pooler(settings: Settings, listen: str) -> bool:
    """Whether the bus's ``listen`` URL goes through the transaction pooler, as
    :func:`listen_url` warns: no ``DATABASE_LISTEN_URL``, or one at the pooler's own host
    and port. A LISTEN there runs on whichever server the pooler lends, which then listens
    for good (such a pooler resets nothing), so the bus does not repeat it."""
    if settings.db_pooler != "transaction":
        return False
    if not (settings.database_url and settings.database_listen_url):
        return True
    pooler = _endpoint(settings.database_url)
    return pooler is not None and _endpoint(listen) == pooler


RELISTEN_EVERY = 1.0
"""The fewest seconds from one LISTEN to the next: a listener lost as soon as it listens is not
made again at once over and over, each time ending every open stream (``bus.RELISTENED``)."""

STEADY_AFTER = 10.0
"""Seconds a listener must have listened for its loss to be no longer "lost at once"
(:class:`Losses`)."""


class Losses:
    """What the bus says of its listener's losses and returns: each at WARNING, but once a
    listener made again (not the start's first) was lost within :data:`STEADY_AFTER` of its
    LISTEN (a server that ends it at once), that is said once and what follows is DEBUG,
    not a loss and a return at WARNING every :data:`RELISTEN_EVERY` for as long as it lasts;
    a listener that then lasts is said to listen again. ``pooled``: the listener goes through
    a transaction pooler, whose LISTEN ends no stream (``bus.EventBus``), which that says."""

    def __init__(self, where: str, *, pooled: bool = False) -> None:
        self.where, self.pooled = where, pooled
        self.at_once = False  # the last listener was lost at once, and none has lasted since
        self.again = False  # a listener was made again after a loss

    def back(self) -> None:
        """Say the listener listens again after a loss."""
        self.again = True
        level = logging.DEBUG if self.at_once else logging.WARNING
        log.log(level, "event listener at %s is listening again", self.where)

    def lasted(self, lived: float) -> None:
        """Say that a listener after those lost at once has listened ``lived`` seconds."""
        if self.at_once and lived >= STEADY_AFTER:
            self.at_once = False
            log.warning("event listener at %s is listening again (%.0f s now)", self.where, lived)

    def closed(self, lived: float) -> None:
        """Say the listener's connection closed ``lived`` seconds after its LISTEN."""
        log.log(
            self._level(lived), "event listener connection at %s closed; reconnecting", self.where
        )

    def silent(self, lived: float, timeout: float) -> None:
        """Say the listener, ``lived`` seconds after its LISTEN, did not answer a probe."""
        message = "event listener at %s did not answer within %g s; reconnecting"
        log.log(self._level(lived), message, self.where, timeout)

    def _level(self, lived: float) -> int:
        if lived >= STEADY_AFTER or not self.again:  # said as any other loss
            self.at_once = False
            return logging.WARNING
        if self.at_once:
            return logging.DEBUG
        self.at_once = True
        ends = "ends no stream (through the pooler)" if self.pooled else "ends every open stream"
        log.warning(
            "event listener at %s was lost at once (%.1f s after it listened); while this goes"
            " on each LISTEN, at most one every %g s, %s, logged at DEBUG",
            self.where,
            lived,
            RELISTEN_EVERY,
            ends,
        )
        return logging.DEBUG


_NEVER_IDLE = (  # no error where the setting does not exist (before PostgreSQL 14)
    "SELECT set_config(name, '0', false) FROM pg_settings WHERE name = 'idle_session_timeout'"
)


async def listen(
    conn: Any,
    channels: Mapping[str, Callable[..., None]],
    silent: set[int],
    timeout: float,
    *,
    pooled: bool = False,
) -> None:
    """LISTEN on ``conn`` to each channel, with its handler, within ``timeout`` seconds: a new
    connection silent before its LISTEN answers (a firewall, a lost host) is dropped as a
    probed one is, not waited for; its backend, which may listen, joins ``silent``. Its
    session is exempt from the server's ``idle_session_timeout``, which would end it, idle
    between probes, over and over (each time ending every open stream); not ``pooled``
    (through a transaction pooler), where the setting would stay on a server it lends."""
    try:
        async with asyncio.timeout(timeout):
            if not pooled:
                await conn.execute(_NEVER_IDLE)
            for channel, handler in channels.items():
                await conn.add_listener(channel, handler)
    except TimeoutError:
        silent.add(conn.get_server_pid())
        raise TimeoutError(f"LISTEN not answered within {timeout:g} s") from None


async def until_lost(
    listener: Any, probe: str, losses: Losses, silent: set[int], every: float, timeout: float
) -> None:
    """Return once ``listener`` closed, or did not answer ``probe``, asked every ``every``
    seconds, within ``timeout`` (then it is aborted, and its backend, which may listen on,
    joins ``silent``); each is said through ``losses``, and the reconnection after it too."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    probe_at = started + every
    while not listener.is_closed():
        await asyncio.sleep(max(0.0, min(1.0, probe_at - loop.time())))
        losses.lasted(loop.time() - started)
        if listener.is_closed() or loop.time() < probe_at:
            continue
        try:
            await listener.execute(probe, timeout=timeout)  # simple protocol
        except TimeoutError:
            silent.add(listener.get_server_pid())  # listening on: end_silent
            listener.terminate()
            losses.silent(loop.time() - started, timeout)
            return
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
            pass  # closed meanwhile: said below
        probe_at = loop.time() + every
    losses.closed(loop.time() - started)


_END_SILENT = (
    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
    " WHERE pid = ANY($1::int[]) AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'"
)


async def end_silent(pool: Any, pids: set[int], timeout: float) -> None:
    """End the backends of listeners dropped for silence (``pids``, emptied): the server
    cannot tell such a connection is gone until TCP gives up, and meanwhile it listens, so
    the server's notification queue cannot move past what it has not read. Only a backend
    whose last statement was a LISTEN is ended; a role that may not end it (nor read its
    statement) leaves it to TCP, which is a DEBUG line, as any other failure here. ``pool``
    None: the listener went through a pooler, whose process ids are its own, so none is."""
    if pool is None or not pids:
        pids.clear()
        return
    ended = sorted(pids)
    pids.clear()
    try:
        async with asyncio.timeout(timeout):
            count = await pool.fetchval(_END_SILENT, ended)
    except Exception as exc:  # noqa: BLE001 - TCP ends it in the end
        log.debug("could not end the silent listener backend(s) %s: %s", ended, exc)
        return
    log.debug("ended %s of the silent listener backend(s) %s", count, ended)
