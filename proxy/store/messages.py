"""The ``messages`` table: the durable history, superseded rows kept, never deleted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

__all__ = [
    "NewMessage", "insert_messages", "fetch_window", "fetch_matched_len", "supersede_from",
    "fetch_messages", "update_evicted", "update_trimmed", "fetch_flags",
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


INSERT_MESSAGES = """
INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id, tokens,
                      redacted, source)
SELECT $1, $2, pos, hash, role, message, tool_call_id, tokens, redacted, source
FROM unnest($3::int[], $4::text[], $5::text[], $6::jsonb[], $7::text[], $8::int[],
            $9::bool[], $10::text[])
     AS t(pos, hash, role, message, tool_call_id, tokens, redacted, source)
"""


async def insert_messages(
    conn: Any, *, tenant: str, session_id: str, rows: Sequence[NewMessage]
) -> None:
    """Append rows in one round trip (unnest), whatever their number."""
    if not rows:
        return
    await conn.execute(
        INSERT_MESSAGES, tenant, session_id,
        [r.pos for r in rows], [r.hash for r in rows], [r.role for r in rows],
        [r.message for r in rows], [r.tool_call_id for r in rows], [r.tokens for r in rows],
        [r.redacted for r in rows], [r.source for r in rows],
    )


FETCH_WINDOW = """
SELECT pos, hash, role, message, tool_call_id, tokens, redacted, evicted_at IS NOT NULL AS evicted
FROM messages
WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL AND trimmed_at IS NULL
  AND (pos < $3 OR pos >= $4)
ORDER BY pos
"""


async def fetch_window(
    conn: Any, *, tenant: str, session_id: str, system_count: int, from_pos: int
) -> list[asyncpg.Record]:
    """The leading system messages plus every live message from ``from_pos`` on: O(window)."""
    return await conn.fetch(FETCH_WINDOW, tenant, session_id, system_count, from_pos)


FETCH_MATCHED_LEN = """
SELECT coalesce(max(pos) + 1, 0) FROM messages
WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL AND hash = any($3::text[])
"""


async def fetch_matched_len(
    conn: Any, *, tenant: str, session_id: str, hashes: Sequence[str]
) -> int:
    """Length of the longest stored prefix the incoming history shares.

    A chain hash covers every message before it, so the highest matching position marks the
    end of the common prefix; the ``messages_hash`` index makes this one indexed probe per hash.
    """
    return int(await conn.fetchval(FETCH_MATCHED_LEN, tenant, session_id, list(hashes)))


SUPERSEDE_FROM = """
UPDATE messages SET superseded_at = now()
WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL AND pos >= $3
"""


async def supersede_from(conn: Any, *, tenant: str, session_id: str, from_pos: int) -> int:
    """Mark the stored tail from ``from_pos`` superseded (kept for the session API)."""
    status = await conn.execute(SUPERSEDE_FROM, tenant, session_id, from_pos)
    return int(status.split()[-1])


FETCH_MESSAGES = """
SELECT pos, role, message, tool_call_id, tokens, redacted, evicted_at, trimmed_at,
       superseded_at, source, created_at
FROM messages
WHERE tenant = $1 AND session_id = $2 AND ($3 OR superseded_at IS NULL)
ORDER BY pos, id LIMIT $4 OFFSET $5
"""


async def fetch_messages(
    conn: Any, *, tenant: str, session_id: str, include_superseded: bool = False,
    limit: int = 1000, offset: int = 0,
) -> list[asyncpg.Record]:
    return await conn.fetch(
        FETCH_MESSAGES, tenant, session_id, include_superseded, limit, offset
    )


UPDATE_EVICTED = """
UPDATE messages m SET message = t.message, evicted_at = now()
FROM unnest($3::int[], $4::jsonb[]) AS t(pos, message)
WHERE m.tenant = $1 AND m.session_id = $2 AND m.superseded_at IS NULL AND m.pos = t.pos
"""


async def update_evicted(
    conn: Any, *, tenant: str, session_id: str, updates: Sequence[tuple[int, dict[str, Any]]]
) -> None:
    """Persist placeholders so every later step sends the same prefix (cache-stable)."""
    if updates:
        await conn.execute(
            UPDATE_EVICTED, tenant, session_id, [u[0] for u in updates], [u[1] for u in updates]
        )


UPDATE_TRIMMED = """
UPDATE messages SET trimmed_at = now()
WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL AND pos = any($3::int[])
"""


async def update_trimmed(
    conn: Any, *, tenant: str, session_id: str, positions: Sequence[int]
) -> None:
    """Mark messages the overflow guard dropped: kept in the store, gone from every prompt.

    Persisting the cut (instead of re-trimming each step) keeps later prompts' prefix stable.
    """
    if positions:
        await conn.execute(UPDATE_TRIMMED, tenant, session_id, list(positions))


FETCH_FLAGS = """
SELECT tool_call_id FROM messages
WHERE tenant = $1 AND session_id = $2 AND superseded_at IS NULL AND redacted
  AND tool_call_id = any($3::text[])
"""


async def fetch_flags(
    conn: Any, *, tenant: str, session_id: str, tool_call_ids: Sequence[str]
) -> frozenset[str]:
    """The tool_call_ids among ``tool_call_ids`` whose results were redacted (never spilled)."""
    rows = await conn.fetch(FETCH_FLAGS, tenant, session_id, list(tool_call_ids))
    return frozenset(r["tool_call_id"] for r in rows)
