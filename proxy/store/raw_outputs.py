"""``tool_raw_outputs``: the full (redacted-safe) text of spilled tool results.

A result cut at ingestion is spilled here. An evicted result needs no copy: its row keeps
the body beside the placeholder (migration 0008), and :func:`fetchrow_raw_output` reads it
from there, as it reads a result never cut from its message, when no spilled row is as new.
A pointer's handle (``cascade.handles.pin``: id and position) reads that row's own result
instead, as ``client_form`` rebuilds it: an id can name a newer result by then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy.cascade.handles import unpin
from proxy.cascade.text import content_text
from proxy.cascade.truncation import cap_utf8
from proxy.cascade.types import Spill
from proxy.store import client_form
from proxy.store.nul import decode, encode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = ["raw_rows", "fetchrow_raw_output"]


def raw_rows(spills: Sequence[Spill], cap_bytes: int) -> list[tuple[str, str, int, bool]]:
    """(tool_call_id, content capped at ``cap_bytes`` UTF-8 bytes, original bytes, capped?),
    id and content through ``nul.encode`` (a text column holds no NUL)."""
    out = []
    for spill in spills:
        size = len(spill.text.encode("utf-8"))
        content = encode(cap_utf8(spill.text, cap_bytes))
        out.append((encode(spill.tool_call_id), content, size, size > cap_bytes))
    return out


FETCHROW_RAW_OUTPUT = """
SELECT r.content, r.original_bytes, r.capped, r.created_at AS spilled_at,
       m.message, m.created_at, m.redacted, m.placeholder IS NOT NULL AS evicted,
       (r.created_at IS NULL OR r.created_at < m.created_at)
           AND m.placeholder IS NULL AND m.evicted_at IS NULL AND m.trimmed_at IS NULL
           AND NOT m.redacted AND NOT EXISTS (
               SELECT 1 FROM events e
               WHERE e.tenant = $1 AND e.session_id = $2 AND e.name = 'context.truncated'
                 AND e.data ->> 'tool_call_id' = $3 AND e.created_at >= m.created_at
           ) AS whole
FROM (SELECT) AS one
LEFT JOIN tool_raw_outputs r ON r.tenant = $1 AND r.session_id = $2 AND r.tool_call_id = $3
LEFT JOIN LATERAL (
    SELECT message, created_at, redacted, placeholder, evicted_at, trimmed_at FROM messages
    WHERE tenant = $1 AND session_id = $2 AND tool_call_id = $3
    ORDER BY id DESC LIMIT 1
) AS m ON true
"""


async def fetchrow_raw_output(
    conn: Executor, *, tenant: str, session_id: str, tool_call_id: str
) -> dict[str, Any] | None:
    """The full text of a tool call's newest result (the newest message under the id,
    superseded or not): an id can come back (servers that number their calls ``call_0``
    each turn), and the model saw the newest result last, whose marker the live prompt
    holds. Its spilled row when that was written with or after the message (a result cut
    and spilled in one statement: the spill is the whole text); else the body of the
    message, evicted (kept beside its placeholder) or never cut (the whole of it). None
    when there is none, or when that result was cut or cleared with no copy kept
    (redacted, or cut with ``persistRaw`` off; its message holds less than the result): an
    older result under the id is not it. A pointer's handle (``handles.pin``,
    ``<id>@<position>``) reads the result at that position instead (``_fetch_pinned``),
    whatever came under the id since. ``{"content", "original_bytes", "capped"}``; the
    text the client sent, NULs included (``nul``)."""
    pinned = unpin(tool_call_id)
    if pinned is not None:
        found = await _fetch_pinned(conn, tenant, session_id, *pinned)
        if found is not None:
            return found
    row = await conn.fetchrow(FETCHROW_RAW_OUTPUT, tenant, session_id, encode(tool_call_id))
    if row is None:  # no row at all only without a session: the query always has one
        return None
    message_at = row["created_at"]
    if row["spilled_at"] is not None and (message_at is None or row["spilled_at"] >= message_at):
        return {
            "content": decode(row["content"]),
            "original_bytes": row["original_bytes"],
            "capped": row["capped"],
        }
    if message_at is None or not (row["whole"] or (row["evicted"] and not row["redacted"])):
        return None
    return _whole(row["message"])


def _whole(message: Any) -> dict[str, Any]:
    """A stored message's own text as the whole result: nothing of it was cut."""
    text = content_text(message.get("content"))
    return {"content": text, "original_bytes": len(text.encode("utf-8")), "capped": False}


async def _fetch_pinned(
    conn: Executor, tenant: str, session_id: str, tool_call_id: str, pos: int
) -> dict[str, Any] | None:
    """The whole text of the live tool result at ``pos`` when its id is ``tool_call_id``,
    as sent (``client_form``: never cut, evicted, or rebuilt from its own spill); None when
    there is no such row or its text is not kept (redacted, or its spill capped)."""
    sent = await client_form.fetch_sent_forms(
        conn, tenant=tenant, session_id=session_id, positions=[pos]
    )
    msg = sent.get(pos)
    if msg is None or msg.get("role") != "tool" or msg.get("tool_call_id") != tool_call_id:
        return None
    return _whole(msg)
