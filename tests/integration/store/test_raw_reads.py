"""How ``read_tool_output``'s statements find their rows (``store.raw_outputs``): the rows
under a tool call id through the index on it (migration 0031), not by reading every message
of the session, on every page of a long one; and a first read in one round trip, the version
with the read."""

from __future__ import annotations

from typing import Any

from proxy.store import raw_outputs
from tests.integration.store.helpers import S, T, logged
from tests.integration.store.test_raw_pages import _page, _spill


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
        # once: the newest row under the id (the events' gate, and its previous row's
        # position) is taken from the same pass
        assert sum("messages_tool_call" in scan for scan in scans) == 1, scans
        # every other scan looks up positions: none reads the session's rows for the id's
        for scan in scans:
            assert "Index Cond" in scan and ("tool_call_id" in scan or "pos =" in scan), scans


async def test_a_first_read_is_one_statement(conn: Any) -> None:
    # a spill read by its bare id: the version comes with the read, not in a round trip of
    # its own; a later page asks the version alone
    await _spill(conn, "an output " * 500)
    seen = logged(conn)
    first = await _page(conn, 0)
    assert len(seen) == 1, seen
    assert await _page(conn, 0) == first
    assert len(seen) == 2 and "AS version" not in seen[1], seen
