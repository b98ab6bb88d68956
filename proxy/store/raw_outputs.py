"""``tool_raw_outputs``: the full (redacted-safe) text of spilled tool results.

A result cut at ingestion is spilled here. An evicted result needs no copy: its row keeps
the body beside the placeholder (migration 0008), and :func:`fetchrow_raw_output` reads it
from there when no spilled row exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy.cascade.text import content_text
from proxy.cascade.truncation import cap_utf8
from proxy.cascade.types import Spill
from proxy.store.nul import decode, encode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = ["raw_rows", "fetchrow_raw_output", "fetchrow_tool_message"]


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
SELECT content, original_bytes, capped, message FROM (
    SELECT content, original_bytes, capped, NULL::json AS message, created_at, 0 AS kind
    FROM tool_raw_outputs WHERE tenant = $1 AND session_id = $2 AND tool_call_id = $3
    UNION ALL (
        SELECT NULL, NULL, false, message, created_at, 1 FROM messages
        WHERE tenant = $1 AND session_id = $2 AND tool_call_id = $3 AND placeholder IS NOT NULL
          AND NOT redacted
        ORDER BY id DESC LIMIT 1
    )
) AS found
ORDER BY created_at DESC, kind
LIMIT 1
"""


async def fetchrow_raw_output(
    conn: Executor, *, tenant: str, session_id: str, tool_call_id: str
) -> dict[str, Any] | None:
    """The full text of a tool call's result: its spilled row or the body of its evicted
    row (the latest, superseded or not; never a redacted one, which eviction gives no
    handle), whichever was written later: an id can come back (servers that number their
    calls ``call_0`` each turn), and the live placeholder names the newest result. A tie is
    a message cut and spilled in one statement, whose spill is the whole text.
    ``{"content", "original_bytes", "capped"}``, or None; the text the client sent, NULs
    included (``nul``)."""
    row = await conn.fetchrow(FETCHROW_RAW_OUTPUT, tenant, session_id, encode(tool_call_id))
    if row is None:
        return None
    if row["message"] is None:
        return {
            "content": decode(row["content"]),
            "original_bytes": row["original_bytes"],
            "capped": row["capped"],
        }
    text = content_text(row["message"].get("content"))
    return {"content": text, "original_bytes": len(text.encode("utf-8")), "capped": False}


FETCHROW_TOOL_MESSAGE = """
SELECT m.message FROM messages m
WHERE m.tenant = $1 AND m.session_id = $2 AND m.tool_call_id = $3
  AND m.placeholder IS NULL AND m.evicted_at IS NULL AND m.trimmed_at IS NULL AND NOT m.redacted
  AND NOT EXISTS (
    SELECT 1 FROM events e
    WHERE e.tenant = $1 AND e.session_id = $2 AND e.name = 'context.truncated'
      AND e.data ->> 'tool_call_id' = $3
  )
ORDER BY m.id DESC
LIMIT 1
"""


async def fetchrow_tool_message(
    conn: Executor, *, tenant: str, session_id: str, tool_call_id: str
) -> dict[str, Any] | None:
    """A tool result that was never cut, as its newest stored message holds it (the whole
    of it), in :func:`fetchrow_raw_output`'s shape; None when there is none, or when the
    result was cut, cleared or redacted (then its message holds less than the result). Not
    what ``read_tool_output`` reads: the model has such a result in its prompt already."""
    row = await conn.fetchrow(FETCHROW_TOOL_MESSAGE, tenant, session_id, encode(tool_call_id))
    if row is None:
        return None
    text = content_text(row["message"].get("content"))
    return {"content": text, "original_bytes": len(text.encode("utf-8")), "capped": False}
