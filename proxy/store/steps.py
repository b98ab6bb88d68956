"""A chat step's first and last statements, one round trip each, on the ``sessions`` and
``messages`` tables.

``begin_step`` takes the session's lease before the answer and, when the client's new
messages extend the stored head as guessed, stores them; ``record_step`` stores the answer
and frees the lease. Between the two the step makes its one write (``writes.write_step``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from proxy.store.events import EventRows, event_columns, event_objects, events_cte
from proxy.store.leases import SessionBusy
from proxy.store.messages import NewMessage, raw_objects, row_objects
from proxy.store.nul import encode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = [
    "AgentRefused",
    "Begun",
    "BEGIN_STEP",
    "LEASE_TTL",
    "begin_step",
    "RECORD_STEP",
    "record_step",
]


@dataclass(frozen=True, slots=True)
class Begun:
    # the sessions row, its head as it was before this request, with its latest summary
    session: dict[str, Any]
    window: list[asyncpg.Record] | None  # the window's older rows if the new rows were stored


class AgentRefused(Exception):
    """The session runs ``agent``, which the request's proxy key may not use: it moved to
    that agent while the request waited for the lease. Nothing was written."""

    def __init__(self, agent: str) -> None:
        super().__init__(agent)
        self.agent = agent


BEGIN_STEP = (
    "SELECT * FROM cascade_begin_step_v7($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,"
    " $14, $15, $16)"
)
LEASE_TTL = 15.0
"""The lease's time to live when the caller names none (``Settings.lease_ttl_seconds``)."""


async def begin_step(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    agent: str,
    model: str | None,
    guess: tuple[int, str | None] | None = None,
    rows: Sequence[NewMessage] = (),
    raw: Sequence[tuple[str, str, int, bool]] = (),
    head_len: int = 0,
    head_hash: str | None = None,
    system_count: int = 0,
    events: EventRows = ((), ()),
    owner: uuid.UUID | None = None,
    ttl: float = LEASE_TTL,
    agents: Sequence[str] | None = None,
) -> Begun:
    """Take the session's lease for ``owner``, create or read the session (with its latest
    valid summary) and, when the stored head is exactly ``guess`` (length, chain hash),
    store ``rows`` with their ``raw`` outputs and ``events``, move the head and read the
    window's older rows: the whole pre-answer work in one round trip (migration 0028's
    ``cascade_begin_step_v7``, 0021's v6 with the key's agents: the session's scalars as
    typed arguments, rows, raw outputs and events as json arrays of objects, the rows'
    bodies as a json[]; it stores them by ``cascade_append_v2``, as ``writes.append`` does,
    and moves the head in the same row update that takes the lease: one new version of the
    sessions row per step).

    With ``guess`` None, or a wrong one, nothing is written but the session and its lease,
    ``window`` is None, and the caller appends with ``writes.append_and_fetch_window``. The lease
    stays held for ``ttl`` seconds after this returns (the replica renews it), until
    ``record_step`` or ``leases.release_lease`` frees it. Raises :class:`SessionBusy`,
    having written nothing, when another owner holds it. ``owner`` None is a fresh one.

    ``agents`` are the agents the request's proxy key may use (None: any). A stored session
    of another agent raises :class:`AgentRefused`, having written nothing: the statement
    decides on the row it locks, so a session moved to another agent while this request
    waited for its lease is not taken over (its agent overwritten) by a limited key.
    """
    start, start_hash = guess if guess is not None else (None, None)
    records = await conn.fetch(
        BEGIN_STEP,
        tenant,
        session_id,
        agent,
        None if model is None else encode(model),
        owner or uuid.uuid4(),
        start,
        start_hash,
        head_len,
        head_hash,
        system_count,
        ttl,
        row_objects(rows),
        [r.message for r in rows],
        raw_objects(raw),
        event_objects(events),
        None if agents is None else list(agents),
    )
    session = records[0]["session"]
    if session.get("refused") is not None:
        raise AgentRefused(session["refused"])
    if session["busy"]:
        raise SessionBusy(f"session {session_id} is held by another request")
    return Begun(session, records[1:] if session["appended"] else None)


RECORD_STEP = (
    """
WITH held AS (
    SELECT 1 FROM sessions WHERE tenant = $1 AND id = $2
      AND ($12::uuid IS NULL OR lease_owner = $12::uuid)
), reply AS (
    INSERT INTO messages (tenant, session_id, pos, hash, role, message, tokens, source)
    SELECT $1, $2, $3, $4, 'assistant', $5::json, $6, 'upstream'
    WHERE $5::json IS NOT NULL AND EXISTS (SELECT FROM held)
), ev AS ("""
    + events_cte("$10", "$11")
    + """)
UPDATE sessions SET
    head_len = CASE WHEN $5::json IS NULL THEN head_len ELSE $3 + 1 END,
    head_hash = CASE WHEN $5::json IS NULL THEN head_hash ELSE $4 END,
    last_prompt_tokens = $7, last_estimate = $8, calibration = $9, updated_at = now(),
    turn_key = coalesce($13, turn_key),
    turn_blocks = CASE WHEN $13::text IS NULL THEN turn_blocks ELSE $14 END,
    lease_owner = CASE WHEN $12::uuid IS NULL THEN lease_owner END,
    lease_expires = CASE WHEN $12::uuid IS NULL THEN lease_expires END
WHERE tenant = $1 AND id = $2 AND ($12::uuid IS NULL OR lease_owner = $12::uuid)
RETURNING reclaimed_tokens, CASE WHEN $12::uuid IS NOT NULL AND lease_queue IS NOT NULL
    THEN cascade_lease_freed_v1(tenant, id, lease_queue_expires) END AS announced
"""
)


async def record_step(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    reply: NewMessage | None,
    prompt_tokens: int | None,
    estimate: int,
    calibration: float,
    events: EventRows = ((), ()),
    owner: uuid.UUID | None = None,
    turn: tuple[str, str] | None = None,
) -> bool:
    """After the answer: append the relayed reply, record the real prompt size, persist the
    step's events (the trigger NOTIFYs them), keep the per-turn stages' values ``turn``
    (the turn's key and its values as JSON text; None leaves the kept ones) and release
    ``owner``'s lease on the session; one round trip. Returns whether the step was stored.

    The lease is freed in the transaction that stores the step, so the next request on the
    session, whose first statement waits for this row, reads the committed step; a waiter
    queued for it on another replica is told at the commit (``cascade_lease_freed_v1``,
    migration 0023; a NULL queue, the common case, skips the call). With
    ``owner`` named, a lease it no longer holds (it expired and another request took it)
    stores neither reply nor head: the step is not written under another's lease.
    """
    row = await conn.fetchrow(
        RECORD_STEP,
        tenant,
        session_id,
        reply.pos if reply else None,
        reply.hash if reply else None,
        reply.message if reply else None,
        reply.tokens if reply else 0,
        prompt_tokens,
        estimate,
        calibration,
        *event_columns(events),
        owner,
        *(turn or (None, None)),
    )
    return row is not None
