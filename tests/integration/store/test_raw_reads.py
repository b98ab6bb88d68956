"""How ``read_tool_output``'s statements find their rows (``store.raw_outputs``): the rows
under a tool call id through the index on it (migration 0031), not by reading every message
of the session, on every page of a long one."""

from __future__ import annotations

from typing import Any

from proxy.store import raw_outputs
from tests.integration.store.helpers import S, T


async def _long_session(conn: Any, n: int = 4000) -> None:
    await conn.execute(
        "INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id)"
        " SELECT $1, $2, g, md5(g::text), 'tool', '{}', 'call_' || g"
        " FROM generate_series(0, $3 - 1) AS g",
        T,
        S,
        n,
    )
    await conn.execute("ANALYZE messages")


async def _scans(conn: Any, sql: str, *args: Any) -> list[str]:
    """Each scan of messages in the plan, with the condition its index is searched by."""
    lines = [r[0].strip() for r in await conn.fetch("EXPLAIN " + sql, *args)]
    return [
        line + " | " + (lines[i + 1] if i + 1 < len(lines) else "")
        for i, line in enumerate(lines)
        if " on messages" in line and "Bitmap Heap Scan" not in line
    ]


async def test_the_rows_under_an_id_are_found_by_its_index(conn: Any) -> None:
    await _long_session(conn)
    for scans in (
        await _scans(conn, raw_outputs.FETCHROW_RAW_OUTPUT, T, S, "call_3001"),
        await _scans(conn, raw_outputs.FETCH_VERSION, T, S, ["call_3001"], None),
        await _scans(conn, raw_outputs.FETCH_VERSION, T, S, ["call_3001@3001", "call_3001"], 3001),
    ):
        assert any("messages_tool_call" in scan for scan in scans), scans
        # every other scan looks up positions: none reads the session's rows for the id's
        for scan in scans:
            assert "Index Cond" in scan and ("tool_call_id" in scan or "pos =" in scan), scans
