"""The bare read of a tool output (``raw_outputs.fetchrow_raw_output``) gives a row's body as
the whole result only when nothing cut it. A live row tells that by its chain hash alone: the
hash is over the message the client sent, and a cut row holds its cut form. No
``context.truncated`` event decides it (a branch copies none). A superseded row, whose hash
may continue a row since replaced, is still judged by those events."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proxy.store import messages as msgs, raw_outputs
from tests.integration.store.helpers import S, T, insert_messages, rows_for, user

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
HISTORY = [
    user("look"),
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "the whole output"},
]
WHOLE = {"content": "the whole output", "original_bytes": 16, "capped": False}


async def _read(conn: Any) -> dict[str, Any] | None:
    return await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c1")


async def _truncated_event(conn: Any) -> None:
    """A ``context.truncated`` event under the row's id, written after the row."""
    await conn.execute(
        "INSERT INTO events (tenant, session_id, name, data) VALUES ($1, $2, $3, $4)",
        T,
        S,
        "context.truncated",
        {"tool_call_id": "c1"},
    )


async def test_a_live_rows_hash_alone_says_it_holds_the_whole_result(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    assert await _read(conn) == WHOLE
    await _truncated_event(conn)
    assert await _read(conn) == WHOLE  # its body hashes as sent: nothing cut it


async def test_a_live_row_whose_body_is_not_what_was_sent_is_not_whole(conn: Any) -> None:
    # Cut with no copy kept (persistRaw off): the row holds the cut form, and no event says so.
    rows = rows_for(HISTORY)
    cut = {**HISTORY[2], "content": "the wh[... 10 characters omitted ...]"}
    rows[2] = replace(rows[2], message=cut)
    await insert_messages(conn, tenant=T, session_id=S, rows=rows)
    assert await _read(conn) is None


async def test_a_superseded_row_is_judged_by_the_truncation_events(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=1)
    assert await _read(conn) == WHOLE
    await _truncated_event(conn)
    assert await _read(conn) is None


async def test_a_trimmed_row_still_holds_the_whole_result(conn: Any) -> None:
    # The overflow guard's trim only marks the row out of later prompts: its body stays as
    # sent, and a retrieval snippet of it names the bare id for read_tool_output to page.
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    await conn.execute(
        "UPDATE messages SET trimmed_at = now() WHERE tenant = $1 AND session_id = $2 AND pos = 2",
        T,
        S,
    )
    assert await _read(conn) == WHOLE
    pinned = await raw_outputs.fetchrow_raw_output(
        conn, tenant=T, session_id=S, tool_call_id="c1@2"
    )
    assert pinned == WHOLE  # as the pinned handle reads it
