"""Reconcile a client's resent history with the stored one, ingest new messages, load the window.

Runs under the session's advisory lock, on the request's connection. The common case (the
client resent the stored history plus new messages) costs a fixed number of queries: the
session upsert, one insert for all new rows, one head update, one window read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.cascade.pipeline import ingest
from proxy.cascade.types import TRUNCATED, Event, Message, Spill, TokenCounter
from proxy.config import ContextConfig
from proxy.history import Append, Supersede, chain, chain_hash, plan_divergence, plan_reconcile
from proxy.store import messages as msgs, raw_outputs, sessions, summaries

__all__ = [
    "SessionState", "reconcile_and_load", "load_window", "append_reply", "leading_system_count",
]

_SYSTEM_ROLES = ("system", "developer")


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


def leading_system_count(messages: Sequence[Message]) -> int:
    n = 0
    for m in messages:
        if m.get("role") not in _SYSTEM_ROLES:
            break
        n += 1
    return n


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


async def reconcile_and_load(
    conn: Any, *, tenant: str, session_id: str, agent: str, model: str | None,
    messages: Sequence[Message], ctx: ContextConfig, count: TokenCounter,
) -> tuple[SessionState, tuple[Spill, ...]]:
    """Store what is new, supersede what diverged, and return the prompt-form window."""
    row = await sessions.upsert_session(
        conn, tenant=tenant, session_id=session_id, agent=agent, model=model
    )
    hashes = chain(messages)
    plan = await _plan(conn, tenant=tenant, session_id=session_id, hashes=hashes, row=row)
    superseded = 0
    if isinstance(plan, Supersede):
        superseded = await msgs.supersede_from(
            conn, tenant=tenant, session_id=session_id, from_pos=plan.from_pos
        )
        await summaries.invalidate_after(
            conn, tenant=tenant, session_id=session_id, pos=plan.from_pos
        )
        start = plan.from_pos
    else:
        start = plan.start
    rows, spills, events = [], [], []
    for pos in range(start, len(messages)):
        got = ingest(messages[pos], ctx)
        rows.append(msgs.NewMessage(
            pos=pos, hash=hashes[pos], role=str(messages[pos].get("role")),
            message=dict(got.message), tool_call_id=messages[pos].get("tool_call_id"),
            tokens=count([got.message]), redacted=got.redacted > 0,
        ))
        events.extend(got.events)
        if got.spill is not None:
            spills.append(got.spill)
    system_count = leading_system_count(messages)
    if rows or superseded:
        await msgs.insert_messages(conn, tenant=tenant, session_id=session_id, rows=rows)
        await raw_outputs.insert_raw_outputs(
            conn, tenant=tenant, session_id=session_id, spills=spills,
            cap_bytes=ctx.tool_output.raw_cap_bytes,
        )
        await sessions.update_head(
            conn, tenant=tenant, session_id=session_id, head_len=len(messages),
            head_hash=hashes[-1] if hashes else None, system_count=system_count,
        )
    state = SessionState(
        session=row, head_len=len(messages), head_hash=hashes[-1] if hashes else None,
        system_count=system_count, boundary=0, summary=None, summary_version=None,
        window=(), positions=(), redacted_ids=frozenset(), appended=len(rows),
        superseded=superseded, events=tuple(e for e in events if e.name == TRUNCATED),
    )
    state = await load_window(conn, tenant=tenant, session_id=session_id, state=state)
    return state, tuple(spills)


async def load_window(
    conn: Any, *, tenant: str, session_id: str, state: SessionState
) -> SessionState:
    """(Re)load the latest valid summary and the live messages after its boundary."""
    summary = await summaries.fetchrow_latest(conn, tenant=tenant, session_id=session_id)
    boundary = summary["boundary"] if summary else 0
    rows = await msgs.fetch_window(
        conn, tenant=tenant, session_id=session_id, system_count=state.system_count,
        from_pos=max(boundary, state.system_count),
    )
    return replace(
        state, boundary=boundary, summary=summary["content"] if summary else None,
        summary_version=summary["version"] if summary else None,
        window=tuple(r["message"] for r in rows), positions=tuple(r["pos"] for r in rows),
        redacted_ids=frozenset(
            r["tool_call_id"] for r in rows if r["redacted"] and r["tool_call_id"]
        ),
    )


async def append_reply(
    conn: Any, *, tenant: str, session_id: str, state: SessionState, reply: Message,
    count: TokenCounter,
) -> None:
    """Store the assistant reply the proxy relayed, extending the hash chain.

    The client normally resends it on its next request; ``canonical_message`` makes the SDK's
    dump of it hash equal, so that request takes the fast path. If the client sends something
    else instead, the stored reply is superseded (kept, marked), never lost.
    """
    digest = chain_hash(state.head_hash or "", reply)
    row = msgs.NewMessage(
        pos=state.head_len, hash=digest, role="assistant", message=dict(reply),
        tokens=count([reply]), source="upstream",
    )
    await msgs.insert_messages(conn, tenant=tenant, session_id=session_id, rows=[row])
    await sessions.update_head(
        conn, tenant=tenant, session_id=session_id, head_len=state.head_len + 1,
        head_hash=digest, system_count=state.system_count,
    )
