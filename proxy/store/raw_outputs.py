"""``tool_raw_outputs``: the full (redacted-safe) text of spilled tool results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from proxy.cascade.truncation import cap_utf8
from proxy.cascade.types import Spill

__all__ = ["insert_raw_outputs", "fetchrow_raw_output", "fetch_spilled_ids"]

INSERT_RAW_OUTPUTS = """
INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content, original_bytes, capped)
SELECT $1, $2, id, content, nbytes, capped
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bool[]) AS t(id, content, nbytes, capped)
ON CONFLICT (tenant, session_id, tool_call_id) DO NOTHING
"""


async def insert_raw_outputs(
    conn: Any, *, tenant: str, session_id: str, spills: Sequence[Spill], cap_bytes: int
) -> None:
    """Store spills, capped at ``cap_bytes`` UTF-8 bytes (whole characters), recording the
    original size; an existing row is kept as is."""
    if not spills:
        return
    ids, contents, sizes, capped = [], [], [], []
    for spill in spills:
        raw = spill.text.encode("utf-8")
        ids.append(spill.tool_call_id)
        contents.append(cap_utf8(spill.text, cap_bytes))
        sizes.append(len(raw))
        capped.append(len(raw) > cap_bytes)
    await conn.execute(INSERT_RAW_OUTPUTS, tenant, session_id, ids, contents, sizes, capped)


FETCHROW_RAW_OUTPUT = """
SELECT content, original_bytes, capped FROM tool_raw_outputs
WHERE tenant = $1 AND session_id = $2 AND tool_call_id = $3
"""


async def fetchrow_raw_output(
    conn: Any, *, tenant: str, session_id: str, tool_call_id: str
) -> asyncpg.Record | None:
    return await conn.fetchrow(FETCHROW_RAW_OUTPUT, tenant, session_id, tool_call_id)


FETCH_SPILLED_IDS = """
SELECT tool_call_id FROM tool_raw_outputs
WHERE tenant = $1 AND session_id = $2 AND tool_call_id = any($3::text[])
"""


async def fetch_spilled_ids(
    conn: Any, *, tenant: str, session_id: str, tool_call_ids: Sequence[str]
) -> frozenset[str]:
    if not tool_call_ids:
        return frozenset()
    rows = await conn.fetch(FETCH_SPILLED_IDS, tenant, session_id, list(tool_call_ids))
    return frozenset(r["tool_call_id"] for r in rows)
