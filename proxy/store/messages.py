"""The ``messages`` table: the durable history, superseded rows kept, never deleted."""

from __future__ import annotations

import uuid
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from proxy.store.events import (
    NOTIFY_CHANNEL,
    EventRows,
    event_columns,
    event_objects,
    events_cte,
)
from proxy.store.leases import SessionBusy
from proxy.store.nul import encode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = [
    "Begun",
    "begin_step",
    "BEGIN_STEP",
    "NewMessage",
    "fetch_window",
    "append_and_fetch_window",
    "fetch_matched_len",
    "supersede_from",
    "fetch_messages",
    "persist_step",
    "APPEND",
    "append",
    "record_step",
    "StepWrite",
    "write_step",
]


@dataclass(frozen=True, slots=True)
class NewMessage:
    pos: int
    hash: str
    role: str
    message: dict[str, Any]
    tool_call_id: str | None = None
    tokens: int = 0
    redacted: bool = False
    source: str = "client"
    verbatim: bool = False  # stored exactly as the client sent it (see migration 0006)


def _row_objects(
    rows: Sequence[NewMessage],
    evicted: Mapping[int, tuple[dict[str, Any], int]] | None = None,
    trimmed: Container[int] = (),
) -> list[dict[str, Any]]:
    """New rows without their bodies, as the json objects ``cascade_append_v2`` expands; the
    text fields through ``nul.encode`` (a NUL in the client's role or tool_call_id is legal
    JSON, and a text column holds none). The bodies go beside them as a json[]
    (``[r.message for r in rows]``): PostgreSQL's json functions refuse a document with
    ``\\u0000`` in it, which a client's message may hold (migration 0018).

    A row in ``evicted`` (position: placeholder, its tokens) goes in already evicted: it
    costs the placeholder's tokens and is no longer the client's message verbatim; a row in
    ``trimmed`` goes in trimmed (migration 0019)."""
    out = []
    for r in rows:
        hit = evicted.get(r.pos) if evicted else None
        row = {
            "pos": r.pos,
            "hash": r.hash,
            "role": encode(r.role),
            "tool_call_id": None if r.tool_call_id is None else encode(r.tool_call_id),
            "tokens": r.tokens if hit is None else hit[1],
            "redacted": r.redacted,
            "verbatim": r.verbatim and hit is None,
        }
        if r.pos in trimmed:
            row["trim"] = True
        out.append(row)
    return out


def _raw_objects(raw: Sequence[tuple[str, str, int, bool]]) -> list[dict[str, Any]] | None:
    """Spilled raw outputs as json objects; NULL when there are none."""
    if not raw:
        return None
    return [
        {"tool_call_id": i, "content": c, "original_bytes": n, "capped": capped}
        for i, c, n, capped in raw
    ]


# A row's prompt form: an evicted row's placeholder, else its body (migration 0008).
PROMPT_FORM = "coalesce(m.placeholder, m.message)"
_WINDOW_COLUMNS = f"""
SELECT m.pos, m.hash, m.role, {PROMPT_FORM} AS message, m.tool_call_id,
       m.tokens, m.redacted, m.verbatim
FROM messages m
WHERE m.tenant = $1 AND m.session_id = $2 AND m.superseded_at IS NULL AND m.trimmed_at IS NULL
"""


def _window(head_range: str, tail_range: str) -> str:
    """The leading system rows and the rows after the boundary, as two index range scans
    (``cascade_append_v2`` reads the older rows of a step's window the same way).

    One ``pos < a OR pos >= b`` condition lets the planner scan the session's whole index
    range and filter, so every request would read the entire history.
    """
    return (
        f"SELECT * FROM (({_WINDOW_COLUMNS} AND {head_range})"
        f" UNION ALL ({_WINDOW_COLUMNS} AND {tail_range})) w ORDER BY pos"
    )


FETCH_WINDOW = _window("m.pos < $3", "m.pos >= $4")


async def fetch_window(
    conn: Executor, *, tenant: str, session_id: str, system_count: int, from_pos: int
) -> list[asyncpg.Record]:
    """The leading system messages plus every live message from ``from_pos`` on: O(window)."""
    return await conn.fetch(FETCH_WINDOW, tenant, session_id, system_count, from_pos)


async def append_and_fetch_window(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    rows: Sequence[NewMessage],
    raw: Sequence[tuple[str, str, int, bool]],
    head_len: int,
    head_hash: str | None,
    system_count: int,
    old_len: int,
    from_pos: int,
    move_head: bool = True,
    events: EventRows = ((), ()),
) -> list[asyncpg.Record]:
    """One round trip for a request whose new messages ``cascade_begin_step_v6`` did not
    store (no guess, a wrong one, a divergence): store them and their spilled raw outputs,
    move the head, and read the window's *older* rows (positions below ``old_len``; the
    live ones from ``from_pos`` on, and the leading system rows). It is ``append``, which
    says how it commits; the new rows are not read back: the caller already holds them."""
    head = (head_len, head_hash, system_count) if move_head else None
    w = StepWrite(rows=rows, raw=raw, head=head, events=events)
    window = (system_count, from_pos, old_len)
    return await append(conn, tenant=tenant, session_id=session_id, w=w, window=window)


@dataclass(frozen=True, slots=True)
class Begun:
    # the sessions row, its head as it was before this request, with its latest summary
    session: dict[str, Any]
    window: list[asyncpg.Record] | None  # the window's older rows if the new rows were stored


BEGIN_STEP = (
    "SELECT * FROM cascade_begin_step_v6($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,"
    " $14, $15)"
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
) -> Begun:
    """Take the session's lease for ``owner``, create or read the session (with its latest
    valid summary) and, when the stored head is exactly ``guess`` (length, chain hash),
    store ``rows`` with their ``raw`` outputs and ``events``, move the head and read the
    window's older rows: the whole pre-answer work in one round trip (migration 0021's
    ``cascade_begin_step_v6``: the session's scalars as typed arguments, rows, raw outputs
    and events as json arrays of objects, the rows' bodies as a json[]; it stores them by
    ``cascade_append_v2``, as ``append`` does, and moves the head in the same row update
    that takes the lease: one new version of the sessions row per step).

    With ``guess`` None, or a wrong one, nothing is written but the session and its lease,
    ``window`` is None, and the caller appends with ``append_and_fetch_window``. The lease
    stays held for ``ttl`` seconds after this returns (the replica renews it), until
    ``record_step`` or ``leases.release_lease`` frees it. Raises :class:`SessionBusy`,
    having written nothing, when another owner holds it. ``owner`` None is a fresh one.
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
        _row_objects(rows),
        [r.message for r in rows],
        _raw_objects(raw),
        event_objects(events),
    )
    session = records[0]["session"]
    if session["busy"]:
        raise SessionBusy(f"session {session_id} is held by another request")
    return Begun(session, records[1:] if session["appended"] else None)


FETCH_MATCHED_LEN = """
SELECT coalesce(max(m.pos) + 1, 0)
FROM unnest($3::text[]) WITH ORDINALITY AS h(hash, n)
JOIN messages m ON m.tenant = $1 AND m.session_id = $2 AND m.superseded_at IS NULL
                AND m.pos = h.n - 1 AND m.hash = h.hash
WHERE m.pos < cardinality($3::text[])
"""


async def fetch_matched_len(
    conn: Executor, *, tenant: str, session_id: str, hashes: Sequence[str]
) -> int:
    """Length of the longest stored prefix the incoming history shares.

    A chain hash covers every message before it, so the highest position whose stored hash
    equals the client's hash there marks the end of the common prefix (and a stored row can
    only match at its own position). Only positions below ``len(hashes)`` can match, and
    that bound is an index range on ``messages_live_pos``: whatever join the planner picks,
    it reads at most ``len(hashes)`` rows, not the whole stored session.
    """
    return int(await conn.fetchval(FETCH_MATCHED_LEN, tenant, session_id, list(hashes)))


SUPERSEDE_FROM = """
UPDATE messages SET superseded_at = now()
WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL AND pos >= $3
"""


async def supersede_from(conn: Executor, *, tenant: str, session_id: str, from_pos: int) -> int:
    """Mark the stored tail from ``from_pos`` superseded (kept for the session API)."""
    status = await conn.execute(SUPERSEDE_FROM, tenant, session_id, from_pos)
    return int(status.split()[-1])


FETCH_MESSAGES = f"""
SELECT m.pos, m.role, {PROMPT_FORM} AS message, m.tool_call_id, m.tokens, m.redacted,
       m.evicted_at, m.trimmed_at, m.superseded_at, m.source, m.created_at
FROM messages m
WHERE m.tenant = $1 AND m.session_id = $2 AND ($3 OR m.superseded_at IS NULL)
ORDER BY m.pos, m.id LIMIT $4 OFFSET $5
"""


async def fetch_messages(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    include_superseded: bool = False,
    limit: int = 1000,
    offset: int = 0,
) -> list[asyncpg.Record]:
    return await conn.fetch(FETCH_MESSAGES, tenant, session_id, include_superseded, limit, offset)


PERSIST_STEP = (
    """
WITH evicted AS (
    UPDATE messages m SET
        placeholder = coalesce(t.message, m.placeholder), tokens = coalesce(t.tokens, m.tokens),
        evicted_at = CASE WHEN t.message IS NULL THEN m.evicted_at ELSE now() END,
        verbatim = m.verbatim AND t.message IS NULL,
        trimmed_at = CASE WHEN t.trim THEN now() ELSE m.trimmed_at END
    FROM unnest($3::int[], $4::json[], $5::int[], $6::bool[]) AS t(pos, message, tokens, trim)
    WHERE m.tenant = $1 AND m.session_id = $2 AND m.superseded_at IS NULL AND m.pos = t.pos
), reclaimed AS (
    UPDATE sessions SET reclaimed_tokens = reclaimed_tokens + $7
    WHERE tenant = $1 AND id = $2 AND $7 <> 0
), ev AS ("""
    + events_cte("$8", "$9")
    + """)
SELECT pg_notify($10, x) FROM unnest($11::text[]) AS x
"""
)


def _marks_nothing(
    evicted: Sequence[Any],
    trimmed: Sequence[int],
    reclaimed: int,
    events: EventRows,
    transient: Sequence[str],
) -> bool:
    """Whether a step's marks are none at all: ``persist_step`` then sends no statement."""
    return not (evicted or trimmed or reclaimed or events[0] or transient)


async def persist_step(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    evicted: Sequence[tuple[int, dict[str, Any], int]] = (),
    trimmed: Sequence[int] = (),
    reclaimed: int = 0,
    events: EventRows = ((), ()),
    transient: Sequence[str] = (),
) -> None:
    """Before the answer, in one round trip, what the cascade decided for this step's prompt:

    - ``evicted``: (position, placeholder, its token cost), so every later step sends the
      same prefix (cache-stable). The placeholder goes beside the row's body, which stays
      in place (migration 0008): read_tool_output pages an evicted result from there, so
      an eviction stores no copy of it;
    - ``trimmed``: positions the overflow guard dropped, kept in the store but gone from
      every prompt (persisting the cut keeps later prefixes stable too);
    - ``reclaimed``: tokens this step's eviction freed, added to the session's count;
    - ``events`` (persisted; the trigger NOTIFYs them) and ready ``transient`` payloads.

    A position both evicted and trimmed is one row of the UPDATE (PostgreSQL applies only
    one change when a statement updates a row twice). Spilled outputs go in with the
    messages they belong to (``begin_step``, ``append_and_fetch_window``).
    """
    if _marks_nothing(evicted, trimmed, reclaimed, events, transient):
        return
    rows: dict[int, list[Any]] = {pos: [msg, tokens, False] for pos, msg, tokens in evicted}
    for pos in trimmed:
        rows.setdefault(pos, [None, None, False])[2] = True
    await conn.execute(
        PERSIST_STEP,
        tenant,
        session_id,
        list(rows),
        *([row[i] for row in rows.values()] for i in range(3)),
        reclaimed,
        *event_columns(events),
        NOTIFY_CHANNEL,
        list(transient),
    )


@dataclass(frozen=True, slots=True)
class StepWrite:
    """Everything a step writes before the answer, as one value the pure side builds.

    ``rows`` (with their ``raw`` outputs and the new head) are a new session's messages that
    nothing stored yet (held back by ``services.history.reconcile_and_load``, owned by the
    request's ``Turn``); ``evicted`` are (position, placeholder, its tokens), ``trimmed``
    positions, ``reclaimed`` the tokens eviction freed, ``events`` the persisted events
    (stamped) and ``transient`` ready NOTIFY payloads.
    """

    rows: Sequence[NewMessage] = ()
    raw: Sequence[tuple[str, str, int, bool]] = ()
    head: tuple[int, str | None, int] | None = None  # head_len, head_hash, system_count
    evicted: Sequence[tuple[int, dict[str, Any], int]] = ()
    trimmed: Sequence[int] = ()
    reclaimed: int = 0
    events: EventRows = ((), ())
    transient: Sequence[str] = ()

    @property
    def empty(self) -> bool:
        """Whether ``write_step`` would send nothing for it (no rows and no marks)."""
        return not self.rows and _marks_nothing(
            self.evicted, self.trimmed, self.reclaimed, self.events, self.transient
        )

    def joined(self, marks: StepWrite) -> StepWrite:
        """These held-back rows with a step's ``marks``: one write, the rows' ingestion
        events before the step's."""
        return StepWrite(
            rows=self.rows,
            raw=self.raw,
            head=self.head,
            evicted=marks.evicted,
            trimmed=marks.trimmed,
            reclaimed=marks.reclaimed,
            events=(
                [*self.events[0], *marks.events[0]],
                [*self.events[1], *marks.events[1]],
            ),
            transient=marks.transient,
        )


APPEND = (
    "SELECT * FROM cascade_append_v2($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,"
    " $14, $15)"
)


async def append(
    conn: Executor,
    *,
    tenant: str,
    session_id: str,
    w: StepWrite,
    window: tuple[int, int, int] | None = None,
) -> list[asyncpg.Record]:
    """Store ``w``'s new rows, in one round trip (``cascade_append_v2``, migration 0021: the
    one statement text that inserts a client's messages, which ``cascade_begin_step_v6``
    calls too): each row ``w`` evicts goes in already evicted (its placeholder beside the
    body, the placeholder's tokens, not verbatim) and each it trims already trimmed, rather
    than inserted and then updated (a new row version and an entry in each index); with the
    rows, their ``raw`` outputs, the head move (``w.head``; None leaves the head), the
    reclaimed tokens, the events (the trigger NOTIFYs them) and the ``transient`` payloads.
    With ``window`` (system_count, from_pos, old_len) it returns the window's older rows:
    the leading system rows and the live ones in [from_pos, old_len), a verbatim row's body
    left out (the client resent it).

    It commits asynchronously (no WAL flush of its own): everything it writes is the
    client's, which resends it, and the request's last statement (``record_step``) commits
    synchronously, which flushes this one too. A database crash in between loses at most this
    step, whose messages the client resends with its next request (or its retry), and which
    reconciliation then stores again. Its events can be lost with it. The ``messages``
    column is json, so what it reads back later is byte-for-byte what it holds now.
    """
    evicted = {pos: (message, tokens) for pos, message, tokens in w.evicted}
    head_len, head_hash, system_count = w.head if w.head is not None else (None, None, None)
    if window is not None:
        assert system_count in (None, window[0]), "the window's system rows are the head's"
        system_count = window[0]
    return await conn.fetch(
        APPEND,
        tenant,
        session_id,
        w.head is not None,
        head_len,
        head_hash,
        system_count,
        w.reclaimed,
        None if window is None else window[2],
        None if window is None else window[1],
        list(w.transient) or None,
        _row_objects(w.rows, evicted, set(w.trimmed)),
        [r.message for r in w.rows],
        [evicted[r.pos][0] if r.pos in evicted else None for r in w.rows] if evicted else None,
        _raw_objects(w.raw),
        event_objects(w.events),
    )


async def write_step(conn: Executor, *, tenant: str, session_id: str, w: StepWrite) -> None:
    """The one write of a step's decisions, in one statement or none: with new rows, they go
    in already evicted and trimmed (``append``); else the stored rows are marked
    (``persist_step``, which sends nothing when there is nothing to mark)."""
    if w.rows:
        assert w.head is not None, "new rows move the head"
        await append(conn, tenant=tenant, session_id=session_id, w=w)
        return
    await persist_step(
        conn,
        tenant=tenant,
        session_id=session_id,
        evicted=w.evicted,
        trimmed=w.trimmed,
        reclaimed=w.reclaimed,
        events=w.events,
        transient=w.transient,
    )


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
RETURNING reclaimed_tokens
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
    session, whose first statement waits for this row, reads the committed step. With
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
