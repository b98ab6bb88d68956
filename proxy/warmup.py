"""Start-up warm-up: first-use costs a fresh replica would otherwise pay inside its first
requests, paid once before it reports ready.

A replica that has just started pays, in its first requests, for work done once per process or
once per connection: each new PostgreSQL backend compiles the PL/pgSQL step function and plans
its statements on its first call, many times what the next call costs; asyncpg prepares every
statement on each connection; the provider transport loads the trusted CA bundle into an
``SSLContext`` (a plain-http provider's pool is built with the default one too); and the
redaction scanner, truncation regexes and ``cascade.invisible``'s classes (a scan of Unicode's
planes) are built on the first message they see. In a burst
of new sessions right after a start (a rolling deploy) all of it lands on one event loop and
two or three cores, in front of everyone's first chunk (docs/perf.md, Issue 24).

:func:`warm_pool` opens the pool's first connections and runs a new session's two steps on each
in a transaction it rolls back (nothing is stored; the session id is random, so replicas warming
at once do not wait on each other's rows). :func:`warm_process` builds the per-process caches
for every configured agent and provider. Both are best-effort: a failure is logged and the
replica starts anyway, as it would have without them.

The warmed connections stay open: the pool is created with :func:`pool_floor` as its
``min_size`` (:func:`open_pool`), and asyncpg (0.32 on) closes an idle connection after
``max_inactive_connection_lifetime`` (300 s) only while the pool holds more than that floor, so
a burst after a quiet spell finds warm backends rather than paying each one's first call inside
its requests. The connections that outlast a burst are the ones used last, so they have run the
step too. Warming each connection as the pool opens it (asyncpg's ``init``/``setup`` hooks) is
not done: it runs on the request that opened the connection, adding the probe's statements to
that request instead of taking the compile out of it. The cost is the floor's backends held
while idle, within the ``max_connections`` a deployment sizes for its pools (README, Capacity).

When PostgreSQL refuses the floor (its own or the role's connection limit), the replica starts
with one connection and says so rather than failing: during a rolling deploy the old replicas
still hold theirs, which is when a limit is tight, and a replica with fewer warm connections
serves where one that failed to start serves nothing. Behind a transaction pooler the floor is
of connections to the pooler; its server connections follow its own settings.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from proxy.cascade.invisible import visible
from proxy.cascade.pipeline import ingest
from proxy.config import Config
from proxy.store import messages as msgs, steps
from proxy.store.db import Connection, DatabaseUnavailable, acquire, create_pool
from proxy.transport import ProviderTransport, TlsSettings, ca_file_failures

__all__ = [
    "WARM_TENANT",
    "POOL_WARM_MAX",
    "pool_floor",
    "open_pool",
    "warm_connection",
    "warm_pool",
    "warm_process",
]

log = logging.getLogger("cascade")

WARM_TENANT = "cascade-warm-up"
"""The tenant the warm-up's rolled-back probe sessions name (they are never committed)."""
POOL_WARM_MAX = 10
"""At most this many connections are opened and warmed at start, and kept open (asyncpg's own
default ``min_size``): beyond it a replica would hold more of PostgreSQL's ``max_connections``
than many deployments size for, idle or not."""


def pool_floor(max_size: int) -> int:
    """The pool's ``min_size``, and how many connections the start warms: min(pool size,
    ``POOL_WARM_MAX``). They stay open while idle (module docstring)."""
    return min(max_size, POOL_WARM_MAX)


TOO_MANY_CONNECTIONS = "53300"
"""PostgreSQL's too_many_connections: the server's or the role's connection limit."""
FALLBACK_RETRIES = (0.0, 0.05, 0.2, 0.5, 1.0)
"""Seconds before each try of the one-connection pool after the floor was refused: the
refused attempt's backends still count against the limit until they have exited (CI saw the
first try refused that way)."""


async def open_pool(dsn: str, *, max_size: int, **kwargs: Any) -> asyncpg.Pool:
    """The replica's pool, holding :func:`pool_floor` connections open; with one, as before
    the floor, when PostgreSQL refuses that many (``too many connections`` for the server or
    the role): the warm-up is best-effort, so a database sized tightly still gets a replica
    that starts, with a warning that says what was refused."""
    floor = pool_floor(max_size)
    try:
        return await create_pool(dsn, min_size=floor, max_size=max_size, **kwargs)
    except DatabaseUnavailable as exc:
        if floor <= 1 or exc.sqlstate != TOO_MANY_CONNECTIONS:
            raise
        log.warning(
            "PostgreSQL refused %d pooled connections at start (%s); the pool opens "
            "with 1 and grows on demand, and idle connections close after 300 s",
            floor,
            exc.sqlstate,
        )
    # The refused attempt's connections were closed by asyncpg, but each backend leaves
    # PostgreSQL's count only once it has exited, a moment later.
    *retries, last = FALLBACK_RETRIES
    for delay in retries:
        await asyncio.sleep(delay)
        try:
            return await create_pool(dsn, min_size=1, max_size=max_size, **kwargs)
        except DatabaseUnavailable as exc:
            if exc.sqlstate != TOO_MANY_CONNECTIONS:
                raise
    await asyncio.sleep(last)
    return await create_pool(dsn, min_size=1, max_size=max_size, **kwargs)


class _RollBack(Exception):
    """Raised inside the probe's transaction so that it is rolled back."""


def _probe_row(pos: int, role: str) -> msgs.NewMessage:
    return msgs.NewMessage(pos, f"warm-{pos}", role, {"role": role, "content": "warm-up"}, tokens=1)


async def warm_connection(conn: Connection) -> None:
    """A new session's first step and its second, on ``conn``, rolled back: the backend
    compiles ``cascade_begin_step_v7`` (and the ``cascade_append_v2`` it calls) and plans
    what both paths run (creating the session, extending it, recording the reply), and
    asyncpg prepares and caches those statements."""
    owner = uuid.uuid4()
    session_id = f"warm-{owner}"
    try:
        async with conn.transaction():
            for step in range(2):
                pos = 2 * step
                await steps.begin_step(
                    conn,
                    tenant=WARM_TENANT,
                    session_id=session_id,
                    agent="default",
                    model=None,
                    guess=(pos, None if pos == 0 else f"warm-{pos - 1}"),
                    rows=[_probe_row(pos, "user")],
                    head_len=pos + 1,
                    head_hash=f"warm-{pos}",
                    owner=owner,
                )
                await steps.record_step(
                    conn,
                    tenant=WARM_TENANT,
                    session_id=session_id,
                    reply=_probe_row(pos + 1, "assistant"),
                    prompt_tokens=1,
                    estimate=1,
                    calibration=1.0,
                    owner=owner,
                )
            raise _RollBack
    except _RollBack:
        pass


async def _give_back(pool: asyncpg.Pool, acquiring: Sequence[asyncio.Future[Any]]) -> None:
    """A cancelled warm-up (a start interrupted) gives back, closed, the connections it had
    taken, or the pool's close would wait for them for ever; those still being opened are
    cancelled and waited for a moment only (a paused pooler holds their first statements),
    then cancelled again: asyncpg closes such a connection on the first, on its silent
    connection, and drops it on the second. Those taken are given back even if this is
    cancelled too (a second signal) while it waits."""
    try:
        for wait in (1.0, 0.5):
            if pending := [task for task in acquiring if not task.done()]:
                for task in pending:
                    task.cancel()
                await asyncio.wait(pending, timeout=wait)
    finally:
        for task in acquiring:
            if task.done() and not task.cancelled() and task.exception() is None:
                conn = task.result()
                conn.terminate()
                await pool.release(conn)


def _outcome(task: asyncio.Future[Any]) -> Any:
    """A finished task's result, or the exception that ended it (cancelled: CancelledError)."""
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or task.result()


async def warm_pool(
    pool: asyncpg.Pool,
    size: int,
    *,
    timeout: float,
    warm: Callable[[Connection], Any] = warm_connection,
) -> int:
    """Hold ``size`` of the pool's connections at once (opening them), run ``warm`` on each,
    give them back; returns how many were warmed. A connection that cannot be opened or
    warmed is logged and skipped: the pool opens it when a request needs it, as without."""
    acquiring = [asyncio.ensure_future(acquire(pool, timeout)) for _ in range(size)]
    # Waited for, not gathered: a gather cancelled waits for what it gathers, such as a
    # connection asyncpg closes on a silent one (a paused pooler) when its opening is cancelled.
    try:
        if acquiring:
            await asyncio.wait(acquiring)
    except asyncio.CancelledError:
        await _give_back(pool, acquiring)
        raise
    taken = [_outcome(task) for task in acquiring]
    conns = [c for c in taken if not isinstance(c, BaseException)]
    # Waited for too: cancelled, the warm-up drops the connections before their statements'
    # rollbacks, which a silent connection never answers, could hold it.
    warming = [asyncio.ensure_future(warm(c)) for c in conns]
    try:
        if warming:
            await asyncio.wait(warming)
    except asyncio.CancelledError:
        for conn in conns:  # a statement that never answers (a paused pooler) is not awaited
            conn.terminate()
        for task in warming:
            task.cancel()
        await asyncio.wait(warming, timeout=1.0)
        raise
    finally:
        for conn in conns:
            await pool.release(conn)
    done = [_outcome(task) for task in warming]
    warmed = sum(1 for r in done if not isinstance(r, BaseException))
    failures = [r for r in (*taken, *done) if isinstance(r, BaseException)]
    if failures:
        log.warning(
            "warming the database pool: %d of %d connections not warmed (%s: %s); they open "
            "when first needed",
            size - warmed,
            size,
            type(failures[0]).__name__,
            failures[0],
        )
    return warmed


_PROBES = (
    {"role": "user", "content": "warm-up"},
    {"role": "tool", "tool_call_id": "warm-up", "content": "warm-up\nline 2"},
)


def warm_process(
    cfg: Config, count: Callable[[Any], int], transport: ProviderTransport | None
) -> None:
    """Build the per-process caches the first request would: each agent's ingest (redaction
    patterns and scanner, truncation), the token counter on small messages, the classes of
    characters no reader sees (a summary, a plan or a memory fact is read through them), and the
    provider transport's ``SSLContext`` for each provider's TLS settings (and the default
    one, which a plain-http provider's pool is built with)."""
    try:
        for agent in {"default", *cfg.agents}:  # "default" answers a model no agent names
            ctx = cfg.context_for(agent)
            for message in _PROBES:
                ingest(message, ctx)
        count(list(_PROBES))
        for joiners, marks in ((False, False), (False, True), (True, False), (True, True)):
            visible("\u00e9", joiners=joiners, marks=marks)  # non-ASCII: builds its class
    except Exception as exc:
        log.warning("warming the process's caches: %s: %s", type(exc).__name__, exc)
    if transport is None:
        return
    try:
        transport.context_for(TlsSettings())
        for provider in cfg.providers.values():  # a checked caFile's is built by its check
            if not (provider.verify_tls and provider.ca_file):
                transport.context_for(TlsSettings(provider.ca_file, provider.verify_tls))
        for name, ca_file, why in ca_file_failures(transport, cfg):  # 502s say so too
            log.warning(
                "provider %r: its caFile %s cannot be loaded (%s); its requests will answer"
                " 502 until it can",
                name,
                ca_file,
                why,
            )
    except Exception as exc:
        log.warning("warming the process's caches: %s: %s", type(exc).__name__, exc)
