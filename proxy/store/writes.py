"""A chat step's one write before the answer: the client's new rows stored, or the stored
rows marked, as the pure side decided (``StepWrite``), in one statement or none.

``append`` stores new rows (already evicted and trimmed where the step says so) with their
spilled raw outputs and the head move; ``persist_step`` marks stored rows evicted or trimmed
(both also carry the step's events); ``write_step`` picks between the two.
``append_and_fetch_window`` is ``append`` for the rows ``steps.begin_step`` did not store,
reading the window's older rows in the same round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from proxy.store.events import NOTIFY_CHANNEL, EventRows, event_columns, event_objects, events_cte
from proxy.store.messages import NewMessage, raw_objects, row_objects

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = [
    "StepWrite",
    "APPEND",
    "append",
    "append_and_fetch_window",
    "PERSIST_STEP",
    "persist_step",
    "write_step",
]


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
    client's, which resends it, and the request's last statement (``steps.record_step``) commits
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
        row_objects(w.rows, evicted, set(w.trimmed)),
        [r.message for r in w.rows],
        [evicted[r.pos][0] if r.pos in evicted else None for r in w.rows] if evicted else None,
        raw_objects(w.raw),
        event_objects(w.events),
    )


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
    one change when a statement updates a row twice). The session row is locked before the
    message rows, as a compaction's summary insert locks them (``summaries.insert_summary``):
    PostgreSQL runs the data-modifying CTEs the main query does not read last-written first,
    so ``reclaimed`` stays written after ``evicted`` (written before it, the two deadlock).
    Spilled outputs go in with the messages they belong to (``steps.begin_step``,
    ``append_and_fetch_window``).
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
