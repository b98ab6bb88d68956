"""The session API's use cases: list, show, messages, branch, reset, delete, tool outputs.

Every function is scoped by tenant: another tenant's session is indistinguishable from a
missing one (404), so ids leak nothing across tenants. A proxy key limited to some agents
is held to their sessions as it arrives (``api.deps.reach_session``), under a lock too (``agents``).
"""

from __future__ import annotations

import contextlib
import functools
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import asyncpg

from proxy.cascade.eviction import is_placeholder
from proxy.cascade.truncation import page_raw_output
from proxy.config import Config
from proxy.errors import ClientRequestError, CompactionFailed, NotFound
from proxy.services.client_watch import OPERATION_WAITING, ClientWatch, pause
from proxy.services.compaction import DurableSummarizer
from proxy.services.compaction_job import job_for
from proxy.services.lease_wakeups import LeaseWakeups
from proxy.services.session_locks import SessionLocks
from proxy.session_id import validate_session_id
from proxy.store import client_form, messages as msgs, nul, raw_outputs, sessions, summaries, usage

__all__ = [
    "compact_session",
    "list_sessions",
    "show_session",
    "list_messages",
    "branch_session",
    "reset_session",
    "delete_session",
    "tool_output",
]


def _quoted(value: str) -> str:
    """``value`` quoted for a message, its start only when long: an id comes from a URL."""
    return repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."


def _iso(value: Any) -> Any:  # a timestamp's ISO form
    return value.isoformat() if hasattr(value, "isoformat") else value


async def _require(conn: Any, tenant: str, session_id: str) -> Any:
    row = await sessions.fetchrow_session(conn, tenant=tenant, session_id=session_id)
    if row is None:
        raise NotFound(f"no session {session_id!r} (for this API key)")
    return row


async def list_sessions(
    conn: Any,
    cfg: Config,
    *,
    tenant: str,
    limit: int,
    offset: int,
    agents: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The tenant's sessions (with ``agents``, only theirs), latest activity first, each with
    its occupancy as ``show_session`` gives it and its model's context limit (what the
    console's occupancy bar is drawn against): fields of ``show_session``'s view, under its
    names and with its values."""
    rows = await sessions.fetch_sessions(
        conn, tenant=tenant, limit=limit, offset=offset, agents=agents
    )
    return {"object": "list", "data": [_listed(cfg, r) for r in rows]}


def _listed(cfg: Config, row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "session",
        "agent": row["agent"],
        "model": row["model"],
        "parent_id": row["parent_id"],
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["updated_at"]),
        "message_count": row["head_len"],
        "occupancy": _occupancy(row),
        "context_limit": cfg.model_limits(row["model"] or "").context_limit,
        "last_prompt_tokens": row["last_prompt_tokens"],
        "last_estimated_tokens": row["last_estimate"],
        "calibration": row["calibration"],
        "reclaimed_tokens": row["reclaimed_tokens"],
    }


async def show_session(conn: Any, cfg: Config, *, tenant: str, session_id: str) -> dict[str, Any]:
    """Occupancy, context limit, reclaimed tokens, the current summary and message counts."""
    row = await _require(conn, tenant, session_id)
    summary = await summaries.fetchrow_latest(conn, tenant=tenant, session_id=session_id)
    split = await usage.fetch_usage_split(
        conn,
        tenant=tenant,
        session_id=session_id,
        boundary=0 if summary is None else summary["boundary"],
    )
    view = _listed(cfg, row)
    occupancy, limit = view["occupancy"], view["context_limit"]
    return view | {
        "superseded_count": row["superseded_count"],
        "fraction": round(occupancy / limit, 4) if occupancy else 0.0,
        "usage": _usage(split, 0 if summary is None else summary["tokens"], row["calibration"]),
        "reclaimed": usage.reclaimed_by_stage(row),
        "summary": None
        if summary is None
        else {
            "version": summary["version"],
            "boundary": summary["boundary"],
            "tokens": summary["tokens"],
            "content": summary["content"],
            "created_at": _iso(summary["created_at"]),
        },
    }


def _occupancy(row: Mapping[str, Any]) -> int | None:
    """The provider's count of the last prompt; without one (a provider that reports no
    usage), the proxy's estimate of it, calibrated."""
    tokens: int | None = row["last_prompt_tokens"]
    if tokens is None and row["last_estimate"] is not None:
        tokens = round(row["last_estimate"] * row["calibration"])
    return tokens


def _usage(split: Mapping[str, int], summary_tokens: int, calibration: float) -> dict[str, int]:
    """The stored window's estimated tokens by part, calibrated as occupancy is; what the
    proxy adds unstored (``<memory>``, tools ...) is in occupancy only (README)."""
    parts = {
        "system": split["system"],
        "summary": summary_tokens,
        "messages": split["messages"],
        "tool_results": split["tool_results"],
    }
    return {k: round(v * calibration) for k, v in parts.items()}


async def list_messages(
    conn: Any,
    *,
    tenant: str,
    session_id: str,
    include_superseded: bool,
    limit: int,
    offset: int,
    sent_form: bool = False,
) -> dict[str, Any]:
    """The history in its prompt form, or with ``sent_form`` each cut or evicted result as
    the client sent it (what a client resending the history must send back)."""
    await _require(conn, tenant, session_id)
    rows = await msgs.fetch_messages(
        conn,
        tenant=tenant,
        session_id=session_id,
        include_superseded=include_superseded,
        limit=limit,
        offset=offset,
    )
    spilled = await client_form.fetch_spilled_cuts(
        conn, tenant=tenant, session_id=session_id, rows=rows
    )
    cut = [_cut_observation(r) for r in rows]  # the prompt form says which
    if sent_form:
        rows = await _as_sent(conn, tenant, session_id, rows)
    return {
        "object": "list",
        "data": [
            {
                "pos": r["pos"],
                "role": nul.decode(r["role"]),
                "message": r["message"],
                "tool_call_id": None
                if r["tool_call_id"] is None
                else nul.decode(r["tool_call_id"]),
                "truncated": is_cut or was_spilled,
                "tokens": r["tokens"],
                "source": r["source"],
                "redacted": r["redacted"],
                "evicted": r["evicted_at"] is not None and not is_cut,
                "trimmed": r["trimmed_at"] is not None,
                "superseded": r["superseded_at"] is not None,
                "created_at": _iso(r["created_at"]),
            }
            for r, is_cut, was_spilled in zip(rows, cut, spilled, strict=True)
        ],
    }


def _cut_observation(row: Any) -> bool:
    """An observation the observations stage cut or compacted: its rewrite is stored beside
    the row as an eviction's placeholder is, but it is a cut (``truncated``), not a clearing
    (``evicted``); its spill is its row's body, so no raw output marks it."""
    return (
        row["evicted_at"] is not None
        and row["tool_call_id"] is not None
        and nul.decode(row["role"]) == "user"
        and not is_placeholder(row["message"])
    )


async def _as_sent(conn: Any, tenant: str, session_id: str, rows: list[Any]) -> list[Any]:
    rewritten = [
        r["pos"]
        for r in rows
        if r["superseded_at"] is None and r["tool_call_id"] and not r["redacted"]
    ]
    sent = await client_form.fetch_sent_forms(
        conn, tenant=tenant, session_id=session_id, positions=rewritten
    )
    return [
        dict(r) | {"message": sent[r["pos"]]}
        if r["superseded_at"] is None and r["pos"] in sent
        else r
        for r in rows
    ]


@contextlib.asynccontextmanager
async def _turn(
    locks: SessionLocks,
    client: ClientWatch | None,
    wakeups: LeaseWakeups | None,
    tenant: str,
    session_id: str,
) -> AsyncIterator[sessions.Pause | None]:
    """An operation's turn on a session: its place in this replica's queue (``locks``),
    then the pause between two tries at a lease another replica holds, which the store's
    ``_locked`` calls. The pause ends the operation when its client leaves and ends early
    when that replica frees the session (``wakeups``, registered from the first pause only);
    None without either: the store's plain sleep."""
    async with locks.turn((tenant, session_id), client, OPERATION_WAITING):
        if client is None and wakeups is None:
            yield None
            return
        with wakeups.watch(tenant, session_id) if wakeups else contextlib.nullcontext() as wake:
            yield functools.partial(pause, client, wake=wake, why=OPERATION_WAITING)


async def branch_session(
    conn: Any,
    locks: SessionLocks,
    *,
    tenant: str,
    session_id: str,
    new_id: str | None,
    client: ClientWatch | None = None,
    wakeups: LeaseWakeups | None = None,
    agents: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Copy the live history, raw outputs and summaries into an independent new session.

    Reset, delete and branch take their turn in this replica's queue for the session
    (``locks``), then wait for a request in flight on another replica (``store.sessions``).
    One whose ``client`` leaves during either wait ends there (``ClientDisconnected``),
    nothing changed: run later, a branch its client retried would find its target taken.
    ``wakeups`` ends a pause between tries when the other replica frees the session."""
    await _require(conn, tenant, session_id)
    target = (
        validate_session_id(new_id, source="body 'id'")
        if new_id is not None
        else (f"{session_id[:100]}-branch-{secrets.token_hex(4)}")
    )
    taken = ClientRequestError(f"session {target!r} already exists; pick another id", param="id")
    if await sessions.fetchrow_session(conn, tenant=tenant, session_id=target):
        raise taken
    try:
        async with _turn(locks, client, wakeups, tenant, session_id) as between:
            copied = await sessions.copy_session(
                conn, tenant=tenant, source=session_id, target=target, pause=between, agents=agents
            )
    except asyncpg.UniqueViolationError:  # made meanwhile: a concurrent branch or request
        raise taken from None
    if not copied:  # deleted while this waited its turn
        raise NotFound(f"no session {session_id!r} (for this API key)")
    return {"id": target, "object": "session", "parent_id": session_id}


async def reset_session(
    conn: Any,
    locks: SessionLocks,
    *,
    tenant: str,
    session_id: str,
    client: ClientWatch | None = None,
    wakeups: LeaseWakeups | None = None,
    agents: Sequence[str] | None = None,
) -> dict[str, Any]:
    await _require(conn, tenant, session_id)
    async with _turn(locks, client, wakeups, tenant, session_id) as between:
        found = await sessions.reset_session(
            conn, tenant=tenant, session_id=session_id, pause=between, agents=agents
        )
    if not found:  # deleted while this waited its turn
        raise NotFound(f"no session {session_id!r} (for this API key)")
    return {"id": session_id, "object": "session", "reset": True}


async def delete_session(
    conn: Any,
    locks: SessionLocks,
    *,
    tenant: str,
    session_id: str,
    client: ClientWatch | None = None,
    wakeups: LeaseWakeups | None = None,
    agents: Sequence[str] | None = None,
) -> dict[str, Any]:
    async with _turn(locks, client, wakeups, tenant, session_id) as between:
        deleted = await sessions.delete_session(
            conn, tenant=tenant, session_id=session_id, pause=between, agents=agents
        )
    if not deleted:
        raise NotFound(f"no session {session_id!r} (for this API key)")
    return {"id": session_id, "object": "session", "deleted": True}


async def tool_output(
    conn: Any,
    cfg: Config,
    *,
    tenant: str,
    session_id: str,
    tool_call_id: str,
    offset: int,
    limit: int | None,
    grep: str | None,
) -> dict[str, Any]:
    """The same pages the model gets from read_tool_output (the session agent's page cap)
    of the newest result under the id: a spilled or evicted one; one never cut, from its
    stored message, which is the whole of it. A result cut with no copy kept (redacted, or
    ``persistRaw`` off) has none: its message holds only what the model was sent."""
    session = await _require(conn, tenant, session_id)
    max_chars = cfg.context_for(session["agent"]).tool_output.max_chars
    row = await raw_outputs.fetchrow_raw_output(
        conn, tenant=tenant, session_id=session_id, tool_call_id=tool_call_id
    )
    if row is None:
        raise NotFound(
            f"no stored output for tool call {_quoted(tool_call_id)} in this session (none is kept"
            " for a result cut or cleared with no copy, e.g. redacted; what the session"
            f" holds is at GET /v1/sessions/{session_id}/messages)"
        )
    page = page_raw_output(
        row["content"], id=tool_call_id, offset=offset, limit=limit, grep=grep, max_chars=max_chars
    )
    return {
        "id": tool_call_id,
        "object": "tool_output",
        "total_chars": len(row["content"]),
        "original_bytes": row["original_bytes"],
        "capped": row["capped"],
        "page": page,
    }


async def compact_session(
    conn: Any,
    summarizer: DurableSummarizer,
    cfg: Config,
    *,
    tenant: str,
    session_id: str,
    headers: Mapping[str, str],
) -> dict[str, Any]:
    """Force a compaction now, regardless of thresholds (waits for one already running),
    with the session's agent's fast model."""
    row = await _require(conn, tenant, session_id)
    job = job_for(
        cfg,
        tenant=tenant,
        session_id=session_id,
        agent=row["agent"],
        model=row["model"] or "",
        headers=headers,
        trigger="api",
    )
    result = await summarizer.compact_now(job)
    if result is None:
        raise NotFound(f"no session {session_id!r} (for this API key)")
    if result.failed:  # a failure is not a success with compacted: false
        raise CompactionFailed(f"the compaction failed: {result.reason}")
    return {
        "id": session_id,
        "object": "session.compaction",
        "version": result.version,
        "boundary": result.boundary,
        "folded": result.folded,
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "compacted": result.version is not None,
        "reason": result.reason or None,
    }
