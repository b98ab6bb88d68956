"""A session's leases: who runs a request on it, or compacts it, and until when (migration 0016).

A lease is two columns on the session row, an owner and an expiry on the database's clock,
taken and released by short statements, so holding one holds no connection. A chat request's
lease is taken in its first statement (``steps.begin_step``) and released in its last
(``steps.record_step``); the statements here are the rest: the renewal of the leases a
replica holds, the release of a request that stores nothing, the compaction claim, and the
row lock the session API's operations take once the session is free.

Every statement is a single autocommit statement or runs inside one transaction: nothing
relies on a connection's state between transactions, so they work through a
transaction-mode pooler.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = [
    "POLL_MAX_SECONDS",
    "poll_delays",
    "SessionBusy",
    "RENEW_LEASES",
    "renew_leases",
    "renew_lease",
    "RELEASE_LEASE",
    "release_lease",
    "CLAIM_COMPACTION",
    "Claim",
    "claim_compaction",
    "claim_free",
    "RENEW_CLAIMS",
    "renew_claims",
    "RELEASE_COMPACTION",
    "release_compaction",
    "holds_compaction",
    "LEASE_FOR_UPDATE",
    "free_for_update",
    "LEAVE_QUEUE",
    "leave_queue",
]


POLL_MAX_SECONDS = 0.5
"""The longest pause between two tries at a held lease: a lease freed by its holder is taken
at most this late, one freed by expiry at most this long after it expired. A waiter's place
in the session's queue (migration 0022) lasts twice this from its last try."""


_JITTER = random.Random()
"""The jitter's own generator: the process's shared ``random`` state is left to the
application (a seeded run, a property-based test drawing in another thread) untouched."""


def poll_delays(first: float = 0.01) -> Iterator[float]:
    """The pauses of a waiter polling a held lease: doubling from ``first`` up to
    :data:`POLL_MAX_SECONDS`, each jittered down by up to a quarter, so that waiters on
    several replicas do not retry in step."""
    delay = first
    while True:
        yield delay * (1 - _JITTER.random() / 4)
        delay = min(delay * 2, POLL_MAX_SECONDS)


class SessionBusy(Exception):
    """The session's lease is held by another owner (another replica's request, a session
    API operation); nothing was written. The caller gives its connection back and tries
    again shortly."""


RENEW_LEASES = """
WITH mine AS (
    SELECT s.tenant, s.id FROM sessions s
    JOIN unnest($1::text[], $2::text[]) AS h(tenant, id) ON s.tenant = h.tenant AND s.id = h.id
    WHERE s.lease_owner = $3
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE sessions s SET lease_expires = clock_timestamp() + make_interval(secs => $4)
FROM mine WHERE s.tenant = mine.tenant AND s.id = mine.id AND s.lease_owner = $3
RETURNING s.tenant, s.id
"""

RENEW_LEASE = """
WITH mine AS (
    SELECT tenant, id FROM sessions WHERE tenant = $1 AND id = $2 AND lease_owner = $3
    FOR UPDATE
)
UPDATE sessions s SET lease_expires = clock_timestamp() + make_interval(secs => $4)
FROM mine WHERE s.tenant = mine.tenant AND s.id = mine.id
"""


async def renew_leases(
    conn: Executor,
    *,
    keys: Sequence[tuple[str, str]],
    owner: uuid.UUID,
    ttl: float,
    timeout: float | None = None,
) -> set[tuple[str, str]]:
    """Push the expiry of every lease ``owner`` holds among ``keys`` to ``ttl`` from now,
    returning the keys renewed; a lease it no longer holds (released, or expired and taken)
    is left alone, and so is one whose row another transaction holds locked (``SKIP
    LOCKED``): waiting for that row, the statement would hold every other row it renewed,
    stalling those sessions' steps too, and renew none until the lock went. Such a row is
    then waited for alone (:func:`renew_lease`). ``timeout`` bounds the statement in place of
    the pool's bound (``services.leases.renewal_limit``)."""
    rows = await conn.fetch(
        RENEW_LEASES, [k[0] for k in keys], [k[1] for k in keys], owner, ttl, timeout=timeout
    )
    return {(r["tenant"], r["id"]) for r in rows}


async def renew_lease(
    conn: Executor, *, key: tuple[str, str], owner: uuid.UUID, ttl: float
) -> None:
    """Push the expiry of one lease ``owner`` holds, waiting for its row if another
    transaction holds it: queued for the row ahead of a request that comes for it later, the
    renewal goes first when the lock goes, so the holder keeps its lease (holding no other
    row meanwhile). The row is locked before the expiry is computed: an UPDATE that waited
    for a row only locked (not changed) keeps the ``clock_timestamp()`` it read before the
    wait, which a lock held past the time to live leaves in the past."""
    await conn.execute(RENEW_LEASE, key[0], key[1], owner, ttl)


RELEASE_LEASE = """
UPDATE sessions SET lease_owner = NULL, lease_expires = NULL,
    calibration = greatest(calibration, coalesce($4::double precision, calibration))
WHERE tenant = $1 AND id = $2 AND lease_owner = $3
RETURNING CASE WHEN lease_queue IS NOT NULL
    THEN cascade_lease_freed_v1(tenant, id, lease_queue_expires) END
"""


async def release_lease(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    owner: uuid.UUID,
    calibration: float | None = None,
) -> None:
    """Free the session's lease if ``owner`` still holds it (a request that stores nothing),
    telling a waiter queued for it on another replica (migration 0023). A ``calibration``
    (learned from a provider's refusal for length: ``services/window_learned.py``) raises
    the session's in the same statement; it is never lowered here, so a retry of the same
    refused request stores the same value again rather than adding anything."""
    await conn.execute(RELEASE_LEASE, tenant, session_id, owner, calibration)


CLAIM_COMPACTION = """
UPDATE sessions s SET compaction_owner = $3,
    compaction_expires = clock_timestamp() + make_interval(secs => $4)
FROM (SELECT compaction_owner AS owner, compaction_expires AS expires FROM sessions
      WHERE tenant = $1 AND id = $2 FOR UPDATE) old
WHERE s.tenant = $1 AND s.id = $2
  AND (old.owner IS NULL OR old.expires < clock_timestamp())
  AND NOT ($5 AND old.owner IS NULL AND coalesce(old.expires > clock_timestamp(), false))
RETURNING CASE WHEN old.owner IS NULL AND old.expires > clock_timestamp() THEN old.expires END
"""

CLAIM_COMPACTION_SKIPPING = """
WITH free AS (SELECT tenant, id, compaction_owner AS owner, compaction_expires AS expires
              FROM sessions WHERE tenant = $1 AND id = $2 FOR UPDATE SKIP LOCKED)
UPDATE sessions s SET compaction_owner = $3,
    compaction_expires = clock_timestamp() + make_interval(secs => $4)
FROM free
WHERE s.tenant = free.tenant AND s.id = free.id
  AND (free.owner IS NULL OR free.expires < clock_timestamp())
  AND NOT ($5 AND free.owner IS NULL AND coalesce(free.expires > clock_timestamp(), false))
RETURNING CASE WHEN free.owner IS NULL AND free.expires > clock_timestamp() THEN free.expires END
"""


@dataclass(frozen=True, slots=True)
class Claim:
    """A compaction's claim, taken. ``backoff_until``: the end of the failure's backoff the
    claim took over (None: there was none), which a compaction put off for no fault of the
    fast model's (``server_busy``) puts back as it was (``release_compaction``'s ``until``)."""

    backoff_until: datetime | None


async def claim_compaction(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    owner: uuid.UUID,
    ttl: float,
    background: bool = False,
    skip_locked: bool = False,
) -> Claim | None:
    """Claim the session's compaction for ``owner``: None when another compaction holds
    the claim (on any replica), or the session does not exist; with ``background``, also
    while the session backs off after a failed compaction (``release_compaction``).

    A claim waits for the session's row when another transaction holds it locked (a
    summary's insert, which the taker then reads; a reset's work; an operator's lock), for
    the pool's statement bound at most. With ``skip_locked`` (a background compaction, the
    start's closing of interrupted ones: work that can come later) it does not wait: a
    locked row is a claim not taken, False at once, so no such claim holds a connection, or
    the replica's start, for as long as the lock lasts."""
    sql = CLAIM_COMPACTION_SKIPPING if skip_locked else CLAIM_COMPACTION
    row = await conn.fetchrow(sql, tenant, session_id, owner, ttl, background)
    return None if row is None else Claim(row[0])


CLAIM_FREE = """
SELECT (compaction_owner IS NULL OR compaction_expires < clock_timestamp())
   AND NOT ($3 AND compaction_owner IS NULL
            AND coalesce(compaction_expires > clock_timestamp(), false))
FROM sessions WHERE tenant = $1 AND id = $2
"""


async def claim_free(
    conn: Executor, *, tenant: str, session_id: str, background: bool = False
) -> bool:
    """Whether the session's row, read without waiting for it, lets ``claim_compaction``
    (with the same ``background``) take the claim: a claim with ``skip_locked`` not taken
    while this is True met a locked row, not another compaction, a failure's backoff or a
    deleted session, and is worth trying again once the lock goes."""
    return bool(await conn.fetchval(CLAIM_FREE, tenant, session_id, background))


RENEW_CLAIMS = """
WITH mine AS (
    SELECT s.tenant, s.id, h.owner FROM sessions s
    JOIN unnest($1::text[], $2::text[], $3::uuid[]) AS h(tenant, id, owner)
        ON s.tenant = h.tenant AND s.id = h.id
    WHERE s.compaction_owner = h.owner
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE sessions s SET compaction_expires = clock_timestamp() + make_interval(secs => $4)
FROM mine
WHERE s.tenant = mine.tenant AND s.id = mine.id AND s.compaction_owner = mine.owner
"""


async def renew_claims(
    conn: Executor,
    *,
    claims: Sequence[tuple[str, str, uuid.UUID]],
    ttl: float,
    timeout: float | None = None,
) -> None:
    """Push the expiry of each compaction claim (tenant, session, owner) still held; one
    whose row another transaction holds locked is left to the next round, as
    :func:`renew_leases` leaves its lease (and ``timeout`` as it does)."""
    tenants, ids, owners = [c[0] for c in claims], [c[1] for c in claims], [c[2] for c in claims]
    await conn.execute(RENEW_CLAIMS, tenants, ids, owners, ttl, timeout=timeout)


RELEASE_COMPACTION = """
UPDATE sessions SET compaction_owner = NULL,
    compaction_expires = CASE WHEN $5::timestamptz > clock_timestamp() THEN $5::timestamptz
        ELSE clock_timestamp() + make_interval(secs => $4::float8) END
WHERE tenant = $1 AND id = $2 AND compaction_owner = $3
"""


async def release_compaction(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    owner: uuid.UUID,
    backoff: float | None = None,
    until: datetime | None = None,
) -> None:
    """Free the claim. ``backoff`` (seconds, after a failed compaction) leaves the expiry
    behind with no owner: until then a background compaction does not claim the session
    (``claim_compaction``), while a forced or hard one does; None clears it. ``until``, when
    still ahead, is kept instead: a backoff the claim took over (``Claim.backoff_until``)."""
    await conn.execute(RELEASE_COMPACTION, tenant, session_id, owner, backoff, until)


HOLDS_COMPACTION = """
SELECT EXISTS (SELECT 1 FROM sessions WHERE tenant = $1 AND id = $2 AND compaction_owner = $3)
"""


async def holds_compaction(
    conn: Executor, *, tenant: str, session_id: str, owner: uuid.UUID
) -> bool:
    """Whether ``owner`` still holds the session's compaction claim: not once the session
    was deleted (a new one under the same id included) or another compaction took the
    claim after it lapsed."""
    return bool(await conn.fetchval(HOLDS_COMPACTION, tenant, session_id, owner))


LEASE_FOR_UPDATE = "SELECT cascade_lease_for_update_v1($1, $2, $3)"


async def free_for_update(
    conn: Executor, *, tenant: str, session_id: str, owner: uuid.UUID
) -> bool:
    """Inside a transaction: lock the session's row and say whether ``owner`` (one session
    API operation, the same on each of its tries) may work on it now: no live lease is held
    and no waiter from another replica is ahead of it (True also when there is no row).
    When not, ``owner`` keeps its place in the session's queue of waiters (migration 0022)
    for a second, so a try at least every :data:`POLL_MAX_SECONDS` keeps it. Holding the
    row lock to the transaction's end, a request's first statement, which takes the lease
    by updating the row, waits for it."""
    return bool(await conn.fetchval(LEASE_FOR_UPDATE, tenant, session_id, owner))


LEAVE_QUEUE = """
UPDATE sessions SET
    lease_queue = nullif(lease_queue[:array_position(lease_queue, $3) - 1]
                         || lease_queue[array_position(lease_queue, $3) + 1:], '{}'),
    lease_queue_expires = nullif(lease_queue_expires[:array_position(lease_queue, $3) - 1]
                                 || lease_queue_expires[array_position(lease_queue, $3) + 1:],
                                 '{}')
WHERE tenant = $1 AND id = $2 AND $3 = ANY(lease_queue)
RETURNING CASE WHEN lease_queue IS NOT NULL
                    AND (lease_owner IS NULL OR lease_expires < clock_timestamp())
    THEN cascade_lease_freed_v1(tenant, id, lease_queue_expires) END
"""


async def leave_queue(conn: Executor, *, tenant: str, session_id: str, owner: uuid.UUID) -> None:
    """Take ``owner`` (a session operation that stops waiting: its client left) out of the
    session's queue of waiters now, rather than let its place lapse a second after its last
    try (migration 0022) while the waiters behind it are refused. When the lease is free,
    the waiters still queued are told at once (``cascade_lease_freed_v1``, migration 0023)."""
    await conn.execute(LEAVE_QUEUE, tenant, session_id, owner)
