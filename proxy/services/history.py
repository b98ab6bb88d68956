"""Reconcile a client's resent history with the stored one, ingest new messages, load the window.

Runs on the request's connection and takes the session's advisory lock in its first
statement. The common case (the client resent the stored history plus new messages) costs
two statements: lock + session upsert (which also returns the latest valid summary) and one
statement that stores the new messages, their spilled raw outputs and events, moves the
head, and reads the window's older rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.cascade.pipeline import drop_commands, ingest
from proxy.cascade.summary import fold_summary, system_prefix_count
from proxy.cascade.tokens import MemoCounter
from proxy.cascade.types import MESSAGE_APPENDED, TRUNCATED, Event, Message
from proxy.config import ContextConfig
from proxy.history import Append, Supersede, plan_divergence, plan_reconcile
from proxy.store import messages as msgs, raw_outputs, sessions, summaries
from proxy.store.events import EventRows

__all__ = [
    "SessionState", "reconcile_and_load", "load_window",
]

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
    spilled: frozenset[str]
    appended: int
    superseded: int
    events: tuple[Event, ...]
    estimate: int = 0  # tokens of the prompt this window folds to (summary in, /compact out)


def _estimated(state: SessionState, count: MemoCounter) -> SessionState:
    folded = fold_summary(
        drop_commands(state.window), summary=state.summary, system_count=state.system_count
    )
    return replace(state, estimate=count(folded))


async def _plan(conn: Any, *, tenant: str, session_id: str, hashes: list[str], row: Any) -> (
    Append | Supersede
):
    plan = plan_reconcile(hashes, stored_len=row["head_len"], stored_head_hash=row["head_hash"])
    if plan is not None:
        return plan
    matched = await msgs.fetch_matched_len(
        conn, tenant=tenant, session_id=session_id, hashes=hashes
    )
    return plan_divergence(hashes, matched_len=matched, stored_len=row["head_len"])


def _seeded(rows: Sequence[Any], count: MemoCounter) -> list[Message]:
    out = []
    for r in rows:
        count.seed(r["message"], r["tokens"])
        out.append(r["message"])
    return out


async def reconcile_and_load(
    conn: Any, *, tenant: str, session_id: str, agent: str, model: str | None,
    messages: Sequence[Message], hashes: list[str], ctx: ContextConfig, count: MemoCounter,
    stamp: Callable[[Sequence[Event]], EventRows],
) -> SessionState:
    """Store what is new, supersede what diverged, and return the prompt-form window.

    The events this produces (``context.truncated`` per cut result, then one
    ``session.message.appended``) are stamped by ``stamp`` and persisted in the same
    statement as the messages.
    """
    row = await sessions.open_session(
        conn, tenant=tenant, session_id=session_id, agent=agent, model=model
    )
    plan = await _plan(conn, tenant=tenant, session_id=session_id, hashes=hashes, row=row)
    superseded = 0
    summary = (row["summary_version"], row["summary_boundary"], row["summary_content"])
    if isinstance(plan, Supersede):
        superseded = await msgs.supersede_from(
            conn, tenant=tenant, session_id=session_id, from_pos=plan.from_pos
        )
        await summaries.invalidate_after(
            conn, tenant=tenant, session_id=session_id, pos=plan.from_pos
        )
        latest = await summaries.fetchrow_latest(conn, tenant=tenant, session_id=session_id)
        summary = (latest["version"], latest["boundary"], latest["content"]) if latest else (
            None, None, None)
        start = plan.from_pos
    else:
        start = plan.start
    new: list[tuple[int, Message]] = []
    rows, spills, events = [], [], []
    for pos in range(start, len(messages)):
        got = ingest(messages[pos], ctx)
        new.append((pos, got.message))
        rows.append(msgs.NewMessage(
            pos=pos, hash=hashes[pos], role=str(messages[pos].get("role")),
            message=dict(got.message), tool_call_id=messages[pos].get("tool_call_id"),
            tokens=count.one(got.message), redacted=got.redacted > 0,
        ))
        events.extend(e for e in got.events if e.name == TRUNCATED)
        if got.spill is not None:
            spills.append(got.spill)
    if rows:
        events.append(Event(MESSAGE_APPENDED, {
            "from_pos": start, "count": len(rows), "superseded": superseded,
        }))
    system_count = system_prefix_count(messages)
    boundary = summary[1] or 0
    from_pos = max(boundary, system_count)
    old = await msgs.append_and_fetch_window(
        conn, tenant=tenant, session_id=session_id, rows=rows,
        raw=raw_outputs.raw_rows(spills, ctx.tool_output.raw_cap_bytes),
        head_len=len(messages), head_hash=hashes[-1] if hashes else None,
        system_count=system_count, old_len=start, from_pos=from_pos,
        move_head=bool(rows) or superseded > 0, events=stamp(events),
    )
    fresh = [(pos, m, r) for (pos, m), r in zip(new, rows, strict=True)
             if pos < system_count or pos >= from_pos]
    return _estimated(SessionState(
        session=row, head_len=len(messages), head_hash=hashes[-1] if hashes else None,
        system_count=system_count, boundary=boundary, summary=summary[2],
        summary_version=summary[0],
        window=(*_seeded(old, count), *(m for _, m, _ in fresh)),
        positions=(*(r["pos"] for r in old), *(pos for pos, _, _ in fresh)),
        redacted_ids=frozenset(
            [r["tool_call_id"] for r in old if r["redacted"] and r["tool_call_id"]]
            + [r.tool_call_id for _, _, r in fresh if r.redacted and r.tool_call_id]
        ),
        spilled=frozenset(
            [r["tool_call_id"] for r in old if r["spilled"]] + [s.tool_call_id for s in spills]
        ),
        appended=len(rows), superseded=superseded, events=tuple(events),
    ), count)


async def load_window(
    conn: Any, *, tenant: str, session_id: str, state: SessionState, count: MemoCounter
) -> SessionState:
    """(Re)load the latest valid summary and the live messages after its boundary."""
    summary = await summaries.fetchrow_latest(conn, tenant=tenant, session_id=session_id)
    boundary = summary["boundary"] if summary else 0
    rows = await msgs.fetch_window(
        conn, tenant=tenant, session_id=session_id, system_count=state.system_count,
        from_pos=max(boundary, state.system_count),
    )
    return _estimated(replace(
        state, boundary=boundary, summary=summary["content"] if summary else None,
        summary_version=summary["version"] if summary else None,
        window=tuple(_seeded(rows, count)), positions=tuple(r["pos"] for r in rows),
        redacted_ids=frozenset(
            r["tool_call_id"] for r in rows if r["redacted"] and r["tool_call_id"]
        ),
        spilled=frozenset(r["tool_call_id"] for r in rows if r["spilled"]),
    ), count)
