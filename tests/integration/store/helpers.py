"""Test-only setup for store tests (the proxy moves the head inside larger statements)."""

from __future__ import annotations

from typing import Any


async def set_head(
    conn: Any, *, tenant: str, session_id: str, head_len: int, head_hash: str | None,
    system_count: int,
) -> None:
    await conn.execute(
        "UPDATE sessions SET head_len = $3, head_hash = $4, system_count = $5"
        " WHERE tenant = $1 AND id = $2",
        tenant, session_id, head_len, head_hash, system_count,
    )
