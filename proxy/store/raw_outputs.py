"""``tool_raw_outputs``: the full (redacted-safe) text of spilled tool results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from proxy.cascade.truncation import cap_utf8
from proxy.cascade.types import Spill

__all__ = ["raw_rows", "insert_raw_outputs", "fetchrow_raw_output"]

INSERT_RAW_OUTPUTS = """
INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content, original_bytes, capped)
SELECT $1, $2, id, content, nbytes, capped
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bool[]) AS t(id, content, nbytes, capped)
ON CONFLICT (tenant, session_id, tool_call_id) DO NOTHING
"""


def raw_rows(spills: Sequence[Spill], cap_bytes: int) -> list[tuple[str, str, int, bool]]:
    """(tool_call_id, content capped at ``cap_bytes`` UTF-8 bytes, original bytes, capped?)."""
    out = []
    for spill in spills:
        size = len(spill.text.encode("utf-8"))
        out.append((spill.tool_call_id, cap_utf8(spill.text, cap_bytes), size, size > cap_bytes))
    return out


async def insert_raw_outputs(
    conn: Any, *, tenant: str, session_id: str, spills: Sequence[Spill], cap_bytes: int
) -> None:
    """Store spills, capped at ``cap_bytes`` UTF-8 bytes (whole characters), recording the
    original size; an existing row is kept as is."""
    if not spills:
        return
    rows = raw_rows(spills, cap_bytes)
    await conn.execute(
        INSERT_RAW_OUTPUTS, tenant, session_id, *([r[i] for r in rows] for i in range(4))
    )


FETCHROW_RAW_OUTPUT = """
SELECT content, original_bytes, capped FROM tool_raw_outputs
WHERE tenant = $1 AND session_id = $2 AND tool_call_id = $3
"""


async def fetchrow_raw_output(
    conn: Any, *, tenant: str, session_id: str, tool_call_id: str
) -> asyncpg.Record | None:
    return await conn.fetchrow(FETCHROW_RAW_OUTPUT, tenant, session_id, tool_call_id)
