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


async def create_session(
    conn: Any, *, tenant: str, session_id: str, agent: str, model: str | None
) -> None:
    """Create the session row (touch it if it exists); requests do this in
    ``cascade_begin_step``."""
    await conn.execute(
        "INSERT INTO sessions (tenant, id, agent, model) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (tenant, id) DO UPDATE SET updated_at = now()",
        tenant, session_id, agent, model,
    )
