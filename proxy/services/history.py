"""Reconcile a client's resent history with the stored one, ingest new messages, load the window.

Runs on the request's connection and takes the session's lease in its first statement
(``store.leases``; a lease another request holds raises ``SessionBusy`` having written
nothing). What needs no store (the guess of the stored head, the ingest of the messages
after it) was made before the connection was taken (``services/incoming.py``). The common
case (this replica served the session's last request, and the client resent that history
plus new messages) is that one statement: it also stores the new messages, their spilled
raw outputs and events, moves the head, and reads the window's older rows. Otherwise the
first statement only takes the lease and reads the session, and a second one appends (after
a divergence lookup when the history was edited).

A new session whose first request brings a long history (a resumed or forked conversation,
a client that moved to the proxy mid-task) is the exception: nothing is stored for it yet,
so its messages are held back until the first prompt has been assembled, and then go in
with that prompt's evictions already applied, in the statement that would otherwise only
have recorded them (``store.writes.append``). Each evicted result is then one INSERT, not
an INSERT and then an UPDATE (a new row version and an entry in each index).
``reconcile_and_load`` hands such messages to ``hold``, the request's ``Turn``
(``services/turn.py``), which owns them from then on: the step's write takes them
(``Turn.write_step``), and whatever comes first of giving the connection back
(``Turn.park``: a compaction may read the store meanwhile), ``Turn.flush`` (before a
background compaction starts) and ``Turn.abort`` (a refused or failed step) stores them
alone. So what the client sent is stored either way, and no path has to remember it.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.cascade.pipeline import drop_commands
from proxy.cascade.summary import fold_summary
from proxy.cascade.tokens import MemoCounter
from proxy.cascade.types import Event, Message
from proxy.config_context import ContextConfig
from proxy.errors import PermissionDenied
from proxy.history import Append, Supersede, plan_divergence, plan_reconcile
from proxy.services.incoming import Incoming, Pending
from proxy.services.ingestmemo import IngestMemo
from proxy.session_id import SessionKey
from proxy.store import messages as msgs, nul, steps, summaries, writes
from proxy.store.events import EventRows

__all__ = ["SessionState", "reconcile_and_load", "load_window"]


@dataclass(frozen=True, slots=True)
class SessionState:
    session: Any  # the sessions row as it was before this request
    head_len: int
    head_hash: str | None
    system_count: int
    boundary: int
    summary: str | None
    summary_version: int | None
    window: tuple[Message, ...]
    positions: tuple[int, ...]
    redacted_ids: frozenset[str]
    appended: int
    superseded: int
    events: tuple[Event, ...]
    estimate: int = 0  # tokens of the prompt this window folds to (summary in, /compact out)


def _estimate(
    window: Sequence[Message], summary: str | None, system_count: int, count: MemoCounter
) -> int:
    """Tokens of the prompt ``window`` folds to (``SessionState.estimate``)."""
    folded = fold_summary(drop_commands(window), summary=summary, system_count=system_count)
    return count(folded)


async def _plan(conn: Any, key: SessionKey, hashes: list[str], row: Any) -> Append | Supersede:
    plan = plan_reconcile(hashes, stored_len=row["head_len"], stored_head_hash=row["head_hash"])
    if plan is not None:
        return plan
    matched = await msgs.fetch_matched_len(
        conn, tenant=key.tenant, session_id=key.session_id, hashes=hashes
    )
    return plan_divergence(hashes, matched_len=matched, stored_len=row["head_len"])


def _redacted(rows: Sequence[Any]) -> list[str]:
    """Tool-call ids of window rows whose result was redacted."""
    return [nul.decode(r["tool_call_id"]) for r in rows if r["redacted"] and r["tool_call_id"]]


def _seeded(
    rows: Sequence[Any], count: MemoCounter, client: Sequence[Message] = ()
) -> list[Message]:
    """The rows' messages, their stored token counts remembered. A row read without its body
    (verbatim, migration 0006) is the client's message at its position: stored unchanged
    from it, and the hash chain proved the client resent the same message there."""
    out = []
    for r in rows:
        message = r["message"]
        if message is None:
            message = client[r["pos"]]
        count.seed(message, r["tokens"])
        out.append(message)
    return out


async def reconcile_and_load(
    conn: Any,
    key: SessionKey,
    incoming: Incoming,
    *,
    agent: str,
    model: str | None,
    ctx: ContextConfig,
    count: MemoCounter,
    stamp: Callable[[Sequence[Event]], EventRows],
    hold: Callable[[writes.StepWrite], None] | None = None,
    park: Callable[[], Awaitable[None]] | None = None,
    owner: uuid.UUID | None = None,
    ttl: float = steps.LEASE_TTL,
    memo: IngestMemo | None = None,
    agents: Sequence[str] | None = None,
) -> SessionState:
    """Store what is new, supersede what diverged, and return the prompt-form window.

    ``incoming`` is the request's history as ``services.incoming.read`` made it before the
    connection was taken: its guess of the stored head (the head as this replica last left
    it) and the new messages after it, already ingested. When the store still holds exactly
    that head, the new messages are stored in the statement that takes ``owner``'s lease
    (one round trip); otherwise the plan is made from what the store holds, and what it
    needs ingested is ingested then (``memo`` answers for messages whose prefix was
    ingested before: ``services.ingestmemo``).

    With ``hold``, a session with nothing stored hands its messages to ``hold`` as the write
    that stores them, instead of storing them (the module docstring says why and who owns
    them then); the state's window holds them all the same. Otherwise ``park`` (the turn's:
    it gives the connection back) runs right after the last statement, before the window is
    built from the rows read.

    The events this produces (``context.truncated`` per cut result, then one
    ``session.message.appended``) are stamped by ``stamp`` and persisted in the same
    statement as the messages.

    ``agents``, the agents the request's proxy key may use (None: any), are checked against
    the session's agent by the statement that takes the lease: a session that moved to
    another agent while the request waited is the 403 the request's first check gives, with
    nothing written (``steps.AgentRefused``).
    """
    tenant, session_id = key
    messages, hashes = incoming.messages, incoming.hashes
    system_count, head_hash = incoming.system_count, incoming.head_hash
    guessed, pending = incoming.guessed, incoming.pending
    try:
        begun = await steps.begin_step(
            conn,
            tenant=tenant,
            session_id=session_id,
            agent=agent,
            model=model,
            guess=guessed,
            rows=pending.rows if pending else (),
            head_len=len(messages),
            head_hash=head_hash,
            raw=pending.raw if pending else (),
            system_count=system_count,
            events=stamp(pending.events) if pending else ((), ()),
            owner=owner,
            ttl=ttl,
            agents=agents,
        )
    except steps.AgentRefused as refused:
        raise PermissionDenied.agent(agents or (), refused.agent, session_id=session_id) from None
    row = begun.session
    content = row["summary_content"]
    summary = (
        row["summary_version"],
        row["summary_boundary"],
        content if content is None else nul.decode(content),
    )
    if begun.window is not None and pending is not None:
        if park is not None:
            await park()
        return _loaded(
            row, summary, system_count, messages, head_hash, pending, begun.window, count
        )
    plan = await _plan(conn, key, hashes, row)
    if hold and plan == Append(0) and row["head_len"] == 0 and summary[0] is None:
        # Nothing is stored: the window is the new messages alone (module docstring).
        pending = incoming.ingested(0, ctx, count, memo=memo)
        if pending.rows:
            head = (len(messages), head_hash, system_count)
            hold(writes.StepWrite(pending.rows, pending.raw, head, events=stamp(pending.events)))
            return _loaded(row, summary, system_count, messages, head_hash, pending, (), count)
    superseded = 0
    if isinstance(plan, Supersede):
        superseded = await msgs.supersede_from(
            conn, tenant=tenant, session_id=session_id, from_pos=plan.from_pos
        )
        await summaries.invalidate_after(
            conn, tenant=tenant, session_id=session_id, pos=plan.from_pos
        )
        latest = await summaries.fetchrow_latest(conn, tenant=tenant, session_id=session_id)
        summary = (
            (latest["version"], latest["boundary"], latest["content"])
            if latest
            else (None, None, None)
        )
        start = plan.from_pos
    else:
        start = plan.start
    pending = incoming.ingested(start, ctx, count, superseded, memo)
    old = await writes.append_and_fetch_window(
        conn,
        tenant=tenant,
        session_id=session_id,
        rows=pending.rows,
        raw=pending.raw,
        head_len=len(messages),
        head_hash=head_hash,
        system_count=system_count,
        old_len=start,
        from_pos=max(summary[1] or 0, system_count),
        move_head=bool(pending.rows) or superseded > 0,
        events=stamp(pending.events),
    )
    if park is not None:
        await park()
    return _loaded(row, summary, system_count, messages, head_hash, pending, old, count, superseded)


def _loaded(
    row: Any,
    summary: tuple[Any, Any, Any],
    system_count: int,
    messages: Sequence[Message],
    head_hash: str | None,
    pending: Pending,
    old: Sequence[Any],
    count: MemoCounter,
    superseded: int = 0,
) -> SessionState:
    """The state after the append: the stored older rows, then the new ones in the window."""
    boundary = summary[1] or 0
    from_pos = max(boundary, system_count)
    fresh = [
        (pos, m, r)
        for (pos, m), r in zip(pending.new, pending.rows, strict=True)
        if pos < system_count or pos >= from_pos
    ]
    redacted = _redacted(old)
    window = (*_seeded(old, count, messages), *(m for _, m, _ in fresh))
    return SessionState(
        session=row,
        head_len=len(messages),
        head_hash=head_hash,
        system_count=system_count,
        boundary=boundary,
        summary=summary[2],
        summary_version=summary[0],
        window=window,
        positions=(*(r["pos"] for r in old), *(pos for pos, _, _ in fresh)),
        redacted_ids=frozenset(
            redacted + [r.tool_call_id for _, _, r in fresh if r.redacted and r.tool_call_id]
        ),
        appended=len(pending.rows),
        superseded=superseded,
        events=tuple(pending.events),
        estimate=_estimate(window, summary[2], system_count, count),
    )


async def load_window(
    conn: Any, key: SessionKey, state: SessionState, count: MemoCounter
) -> SessionState:
    """(Re)load the latest valid summary and the live messages after its boundary."""
    tenant, session_id = key
    summary = await summaries.fetchrow_latest(conn, tenant=tenant, session_id=session_id)
    boundary = summary["boundary"] if summary else 0
    rows = await msgs.fetch_window(
        conn,
        tenant=tenant,
        session_id=session_id,
        system_count=state.system_count,
        from_pos=max(boundary, state.system_count),
    )
    redacted = _redacted(rows)
    window = tuple(_seeded(rows, count))
    text = summary["content"] if summary else None
    return replace(
        state,
        boundary=boundary,
        summary=text,
        summary_version=summary["version"] if summary else None,
        window=window,
        positions=tuple(r["pos"] for r in rows),
        redacted_ids=frozenset(redacted),
        estimate=_estimate(window, text, state.system_count, count),
    )
