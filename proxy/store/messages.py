"""The ``messages`` table: the durable history, superseded rows kept, never deleted.

Here are a new row's shape and its json form, which a step's statements send
(``steps.begin_step``, ``writes.append``), and the reads of the history: the window a step's
prompt starts from, the prefix an incoming history shares with it, and the session API's
listing.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from proxy.store.nul import encode

if TYPE_CHECKING:
    from proxy.store.db import Executor

__all__ = [
    "NewMessage",
    "row_objects",
    "raw_objects",
    "PROMPT_FORM",
    "fetch_window",
    "fetch_matched_len",
    "supersede_from",
    "fetch_messages",
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


def row_objects(
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


def raw_objects(raw: Sequence[tuple[str, str, int, bool]]) -> list[dict[str, Any]] | None:
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
SELECT m.id, m.pos, m.role, {PROMPT_FORM} AS message, m.tool_call_id, m.tokens,
       m.redacted, m.evicted_at, m.trimmed_at, m.superseded_at, m.source, m.created_at
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
