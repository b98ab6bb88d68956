"""The session API's reads: list, show, messages and tool outputs; what changes a session
(branch, reset, delete, compact) is ``session_changes.py``.

Every function is scoped by tenant: another tenant's session is indistinguishable from a
missing one (404), so ids leak nothing across tenants. A proxy key limited to some agents
is held to their sessions as it arrives (``api.deps.reach_session``), again after the reads
here (``api.deps.read_and_recheck_reach``), and again under the session's lock by the
changes that wait their turn (``session_changes``); ids of other agents' sessions (a parent)
it does not see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from proxy.cascade.eviction import is_placeholder
from proxy.cascade.paging import raw_output_page
from proxy.cascade.redaction import patterns_of, redact
from proxy.config import Config
from proxy.errors import NotFound
from proxy.listing import iso_time, page_of, rows_to_read, session_cursor
from proxy.services import raw_cache
from proxy.store import client_form, messages as msgs, nul, sessions, summaries, usage
from proxy.work_threads import PAGES, off_loop

__all__ = [
    "list_sessions",
    "show_session",
    "list_messages",
    "require_session",
    "tool_output",
]


def _quoted(value: str) -> str:
    """``value`` quoted for a message, its start only when long: an id comes from a URL."""
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


async def require_session(conn: Any, tenant: str, session_id: str) -> Any:
    """The session's row; NotFound when the tenant has none by that id (another tenant's
    session is missing too, so an id leaks nothing)."""
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
    containing: str | None = None,
    after: tuple[datetime, str] | None = None,
) -> dict[str, Any]:
    """The tenant's sessions (with ``after``, those past a cursor's place; with ``agents``,
    only theirs; with ``containing``, only those whose id, agent or model holds it, case
    aside), latest activity first, each with
    its occupancy as ``show_session`` gives it and its model's context limit (what the
    console's occupancy bar is drawn against): fields of ``show_session``'s view, under its
    names and with its values. ``has_more``, as OpenAI's lists say it: a session is past
    the page (one more row is read to know), and ``next_cursor``, the place after the
    page's last row (``listing.session_cursor``), null at the end."""
    rows = await sessions.fetch_sessions(
        conn,
        tenant=tenant,
        limit=rows_to_read(limit),
        offset=offset,
        agents=agents,
        containing=containing,
        after=after,
    )
    rows, more = page_of(rows, limit)
    data = [_listed(cfg, r) for r in rows]
    cursor = session_cursor(rows[-1]["updated_at"], rows[-1]["id"]) if more else None
    if agents is not None:
        for view, row in zip(data, rows, strict=True):
            view["parent_id"] = _parent(row["parent_id"], row["parent_agent"], agents)
    return {"object": "list", "data": data, "has_more": more, "next_cursor": cursor}


def _parent(parent_id: str | None, agent: str | None, agents: Sequence[str]) -> str | None:
    """The ``parent_id`` a key limited to ``agents`` sees: the parent only when it runs one
    of them (``agent``, None when it is gone), else None, as a memory fact's source
    session: it may not list or open the parent, and the branch's history is not its id."""
    return parent_id if agent is not None and agent in agents else None


def _listed(cfg: Config, row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "session",
        "agent": row["agent"],
        "model": row["model"],
        "parent_id": row["parent_id"],
        "created_at": iso_time(row["created_at"]),
        "updated_at": iso_time(row["updated_at"]),
        "message_count": row["head_len"],
        "occupancy": _occupancy(row),
        "context_limit": cfg.model_limits(row["model"] or "").context_limit,
        "last_prompt_tokens": row["last_prompt_tokens"],
        "last_estimated_tokens": row["last_estimate"],
        "calibration": row["calibration"],
        "reclaimed_tokens": row["reclaimed_tokens"],
    }


async def show_session(
    conn: Any,
    cfg: Config,
    *,
    tenant: str,
    session_id: str,
    agents: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Occupancy, context limit, reclaimed tokens, the current summary and message counts;
    for a key limited to ``agents``, ``parent_id`` as ``_parent`` shows it. The summary is
    shown as a prompt carries it: redacted with its agent's patterns in force (``assemble``),
    so one stored before a pattern was added shows what the model now reads."""
    row = await require_session(conn, tenant, session_id)
    ctx = cfg.context_for(row["agent"])
    parent = row["parent_id"]
    if agents is not None and parent is not None:
        agent = await sessions.fetchval_agent(conn, tenant=tenant, session_id=parent)
        parent = _parent(parent, agent, agents)
    summary = await summaries.fetchrow_latest(conn, tenant=tenant, session_id=session_id)
    split = await usage.fetch_usage_split(
        conn,
        tenant=tenant,
        session_id=session_id,
        boundary=0 if summary is None else summary["boundary"],
    )
    view = _listed(cfg, row) | {"parent_id": parent}
    occupancy, limit = view["occupancy"], view["context_limit"]
    return view | {
        "superseded_count": await sessions.count_superseded(
            conn, tenant=tenant, session_id=session_id
        ),
        "fraction": round(occupancy / limit, 4) if occupancy else 0.0,
        "usage": _usage(split, 0 if summary is None else summary["tokens"], row["calibration"]),
        "reclaimed": usage.reclaimed_by_stage(row),
        "summary": None
        if summary is None
        else {
            "version": summary["version"],
            "boundary": summary["boundary"],
            "tokens": summary["tokens"],
            "content": redact(summary["content"], patterns_of(ctx.redaction))[0],
            "created_at": iso_time(summary["created_at"]),
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
    the client sent it (what a client resending the history must send back).

    A live row folded into the current summary is ``summarised``, whatever happened to it
    before: an evicted result folded since is no longer ``evicted`` (its placeholder is in no
    prompt either), as the console and ``sessions show`` label it. ``has_more``: a row is
    past the page."""
    session = await require_session(conn, tenant, session_id)
    latest = await summaries.fetchrow_latest(conn, tenant=tenant, session_id=session_id)
    boundary = 0 if latest is None else latest["boundary"]
    rows = await msgs.fetch_messages(
        conn,
        tenant=tenant,
        session_id=session_id,
        include_superseded=include_superseded,
        limit=rows_to_read(limit),
        offset=offset,
    )
    rows, more = page_of(rows, limit)
    spilled = await client_form.fetch_spilled_cuts(
        conn, tenant=tenant, session_id=session_id, rows=rows
    )
    superseded = await client_form.fetch_superseded_sent_forms(
        conn,
        tenant=tenant,
        session_id=session_id,
        ids=[
            r["id"]
            for r, s in zip(rows, spilled, strict=True)
            if r["superseded_at"]
            and (s or (r["evicted_at"] and r["tool_call_id"]))
            and not r["redacted"]
        ],
    )
    # a superseded row's spill under its id is its own only when its body was cut
    spilled = [
        s and superseded.get(r["id"], (True, None))[0] for r, s in zip(rows, spilled, strict=True)
    ]
    unkept = await client_form.fetch_unkept_cuts(
        conn, tenant=tenant, session_id=session_id, rows=rows, spilled=spilled
    )
    # the prompt form says which observation was cut
    cut = [_cut_observation(r) or u for r, u in zip(rows, unkept, strict=True)]
    if sent_form:
        rows = await _as_sent(conn, tenant, session_id, rows, superseded)
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
                "summarised": folded,
                "evicted": r["evicted_at"] is not None and not is_cut and not folded,
                "trimmed": r["trimmed_at"] is not None,
                "superseded": r["superseded_at"] is not None,
                "created_at": iso_time(r["created_at"]),
            }
            for r, is_cut, was_spilled in zip(rows, cut, spilled, strict=True)
            for folded in (_folded(r, session["system_count"], boundary),)
        ],
        "has_more": more,
    }


def _folded(row: Any, system_count: int, boundary: int) -> bool:
    """Whether a stored row is folded into the summary whose ``boundary`` is given: a live
    row between the leading system messages and the boundary."""
    return row["superseded_at"] is None and system_count <= row["pos"] < boundary


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


async def _as_sent(
    conn: Any,
    tenant: str,
    session_id: str,
    rows: list[Any],
    superseded: Mapping[int, tuple[bool, dict[str, Any] | None]],
) -> list[Any]:
    """``rows`` with each cut or evicted result as sent: a live one's from its chain and
    spill, a superseded cut one's as ``client_form.fetch_superseded_sent_forms`` rebuilt it."""
    rewritten = [
        r["pos"]
        for r in rows
        if r["superseded_at"] is None and r["tool_call_id"] and not r["redacted"]
    ]
    sent = await client_form.fetch_sent_forms(
        conn, tenant=tenant, session_id=session_id, positions=rewritten
    )
    out = []
    for r in rows:
        if r["superseded_at"] is None:
            message = sent.get(r["pos"])
        else:
            message = superseded.get(r["id"], (False, None))[1]
        out.append(r if message is None else dict(r) | {"message": message})
    return out


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
    ``persistRaw`` off) has none: its message holds only what the model was sent.
    ``has_more`` and ``next_offset`` say where the next page starts, which the page's own
    note says in words."""
    session = await require_session(conn, tenant, session_id)
    max_chars = cfg.context_for(session["agent"]).tool_output.max_chars
    row = await raw_cache.read_output(
        conn, tenant=tenant, session_id=session_id, tool_call_id=tool_call_id
    )
    if row is None:
        raise NotFound(
            f"no stored output for tool call {_quoted(tool_call_id)} in this session (none is kept"
            " for a result cut or cleared with no copy, e.g. redacted; what the session"
            f" holds is at GET /v1/sessions/{session_id}/messages)"
        )
    # on a page thread: a grep reads every line of up to rawCapBytes of text, which on the
    # event loop would hold every other request until it is done (``work_threads``)
    page, next_offset = await off_loop(
        PAGES,
        raw_output_page,
        row.content,
        id=tool_call_id,
        offset=offset,
        limit=limit,
        grep=grep,
        max_chars=max_chars,
    )
    return {
        "id": tool_call_id,
        "object": "tool_output",
        "total_chars": len(row.content),
        "original_bytes": row.original_bytes,
        "capped": row.capped,
        "page": page,
        "has_more": next_offset is not None,
        "next_offset": next_offset,
    }
