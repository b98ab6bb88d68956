"""This replica's session leases: its owner id, their time to live, and their renewal.

A chat request holds its session's lease (migration 0016) from its first statement to its
last, and no connection in between: the provider's answer may take minutes, and a held
connection would cap a replica's requests in flight at its pool size (README, Capacity).
Every lease this replica's requests take names one owner, ``Leases.owner``, drawn when the
replica starts: within the replica ``SessionLocks`` already lets one request per session
through, so a lease the replica holds on a session whose queue it heads is that request's
own (one a failed last statement left behind included), and it takes it straight back.

One task renews them: every ``ttl / 3`` one short statement, on a connection borrowed from
the pool for it, pushes the expiry of every lease held here, and of every compaction claim
running here, to ``ttl`` from now; a lease whose row another transaction holds, which that
statement skips, is renewed by one of its own that waits for the row. A replica that dies
stops renewing; its leases expire within ``ttl`` and a waiter on another replica, polling at
most ``POLL_MAX_SECONDS`` apart, takes the session then: the bound the README states. A
renewal that fails (the database away, the pool busy) is tried again a third of the way
sooner; two more chances before the lease could lapse. The renewal's statement has a limit
of its own, :func:`renewal_limit`, far below the time to live and the pool's statement bound:
one that hangs (a dead connection, a paused pooler) fails in time to be tried again, rather
than hold the loop past the expiry while another replica takes the session; its connection
is closed, not given back (``db.borrowed``), whose reset would wait for it as long.

A holder whose renewals kept failing goes on relaying its answer: its client gets it, and
what it writes after is fenced by the row, not by its clock: its last statement stores the
reply only while the row still names it as owner (``steps.record_step``), and a
compaction's summary only while it holds the claim (``summaries.insert_summary``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import asyncpg

from proxy.store import leases
from proxy.store.db import DatabaseTimeout, DatabaseUnavailable, PoolExhausted, borrowed
from proxy.tasks import stop_task

__all__ = ["Leases", "renewal_limit"]

log = logging.getLogger("cascade.leases")

Key = tuple[str, str]

WAITS_MAX = 4
"""Renewals waiting at once for a locked row, each on a pooled connection: a lock over many
sessions' rows (an operator's ``SELECT … FOR UPDATE`` on the table) takes no more of the
pool than these from the requests; the rest wait at a later round."""


def renewal_limit(ttl: float) -> float:
    """Seconds a renewal round may take, its wait for a pooled connection and its
    statements together: a ninth of the time to live, the pause before a failed round's
    retry. A round that starts a third of the way into the lease, hangs this long and pauses
    this long again leaves time for two more tries, each as long, before the lease could
    lapse; a healthy renewal takes milliseconds. A pool whose every connection is held (a
    burst of requests) counts against the same limit as a hung statement does."""
    return ttl / 9


class Leases:
    def __init__(self, pool: asyncpg.Pool, *, ttl: float, acquire_timeout: float) -> None:
        self.pool = pool
        self.ttl = ttl
        self.owner = uuid.uuid4()
        self._acquire_timeout = min(acquire_timeout, ttl / 3)
        self._held: dict[Key, int] = {}  # sessions with a request of this replica in flight
        self._claims: dict[tuple[str, str, uuid.UUID], int] = {}  # compactions running here
        self._task: asyncio.Task[None] | None = None
        self._waits: dict[Key, asyncio.Task[None]] = {}  # renewals waiting for a locked row

    def hold(self, key: Key) -> None:
        """Renew ``key``'s lease from now on, until as many ``drop`` calls."""
        self._held[key] = self._held.get(key, 0) + 1

    def drop(self, key: Key) -> None:
        n = self._held.get(key, 0)
        if n <= 1:
            self._held.pop(key, None)
        else:
            self._held[key] = n - 1

    def holding(self) -> list[Key]:
        return list(self._held)

    def claim(self, tenant: str, session_id: str, owner: uuid.UUID) -> None:
        """Renew the compaction claim ``owner`` holds, until ``unclaim``."""
        c = (tenant, session_id, owner)
        self._claims[c] = self._claims.get(c, 0) + 1

    def unclaim(self, tenant: str, session_id: str, owner: uuid.UUID) -> None:
        c = (tenant, session_id, owner)
        n = self._claims.get(c, 0)
        if n <= 1:
            self._claims.pop(c, None)
        else:
            self._claims[c] = n - 1

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="lease-renewal")

    async def aclose(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
            self._task = None
        for wait in list(self._waits.values()):
            await stop_task(wait)

    async def renew(self) -> None:
        """Renew every lease and claim held here now, in at most two statements."""
        keys, claims = list(self._held), list(self._claims)
        if not keys and not claims:
            return
        renewed: set[Key] = set()
        limit = renewal_limit(self.ttl)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit

        def left() -> float:
            """What the round's limit leaves a statement, after the wait and those before."""
            if (remaining := deadline - loop.time()) <= 0:
                raise DatabaseTimeout(f"a lease renewal round ran past its {limit:g} s")
            return remaining

        async with borrowed(self.pool, limit) as conn:
            if keys:
                renewed = await leases.renew_leases(
                    conn, keys=keys, owner=self.owner, ttl=self.ttl, timeout=left()
                )
            if claims:
                await leases.renew_claims(conn, claims=claims, ttl=self.ttl, timeout=left())
        for key in keys:
            if key not in renewed and key not in self._waits and len(self._waits) < WAITS_MAX:
                self._waits[key] = asyncio.create_task(self._wait_for_row(key))

    async def _wait_for_row(self, key: Key) -> None:
        """Renew ``key``'s lease, which the statement for every lease skipped (its row locked,
        or the lease no longer held here), waiting for its row on a connection of its own:
        queued ahead of a request that comes for the row later, so that one does not take the
        lease of a request still alive here once the lock goes. Cancelled at the pool's
        statement bound, it is queued again at the next round."""
        try:
            async with borrowed(self.pool, self._acquire_timeout) as conn:
                await leases.renew_lease(conn, key=key, owner=self.owner, ttl=self.ttl)
        except (DatabaseUnavailable, PoolExhausted, asyncpg.PostgresError, OSError) as exc:
            log.warning("could not renew the lease of session %s: %s", key[1], exc)
        finally:
            self._waits.pop(key, None)

    async def _run(self) -> None:
        pause = self.ttl / 3
        while True:
            await asyncio.sleep(pause)
            try:
                await self.renew()
                pause = self.ttl / 3
            except (DatabaseUnavailable, PoolExhausted, asyncpg.PostgresError, OSError) as exc:
                log.warning("could not renew this replica's session leases: %s", exc)
                pause = self.ttl / 9
