"""The version (``raw_outputs.fetchval_version``) names every row the read
(``fetchrow_raw_output``) depends on: the version's list of rows and the read's queries are
written apart, and a row the read comes to depend on that the version does not name would let
a kept text outlive a change to it. So each row of the session's tables is changed in turn
(deleted; a message superseded too), in a transaction rolled back after, and wherever the
read's answer changes the version must change with it. ``fetch_first`` answers as the two do."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from proxy.store import messages as msgs, raw_outputs
from tests.integration.store.helpers import S, T, insert_messages, rows_for, user
from tests.integration.store.test_raw_pages import _respill, _spill

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
HISTORY = [
    user("look"),
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "the whole output"},
]
TABLES = ("messages", "tool_raw_outputs", "tool_raw_output_versions", "events")


async def _whole(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))


async def _spilled(conn: Any) -> None:
    await _spill(conn, "a spilled output " * 40)


async def _respilled(conn: Any) -> None:
    # the pinned handle's result is the spill replaced (tool_raw_output_versions)
    await _spilled(conn)
    await _respill(conn, "a later output " * 40)


async def _superseded(conn: Any) -> None:
    await _whole(conn)
    await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=1)
    await conn.execute(
        "INSERT INTO events (tenant, session_id, name, data) VALUES ($1, $2, $3, $4)",
        T,
        S,
        "context.truncated",
        {"tool_call_id": "c1"},
    )


async def _evicted(conn: Any) -> None:
    rows = rows_for(HISTORY)
    rows[2] = replace(rows[2], message={**HISTORY[2], "content": "the wh[cut]"})
    await insert_messages(conn, tenant=T, session_id=S, rows=rows)
    await conn.execute(
        "UPDATE messages SET placeholder = message, message = $3, evicted_at = now()"
        " WHERE tenant = $1 AND session_id = $2 AND pos = 2",
        T,
        S,
        HISTORY[2],
    )


class _Undo(Exception):
    pass


async def _answers(conn: Any, handle: str) -> tuple[str, Any]:
    where = {"tenant": T, "session_id": S, "tool_call_id": handle}
    version = await raw_outputs.fetchval_version(conn, **where)
    read = await raw_outputs.fetchrow_raw_output(conn, **where)
    assert await raw_outputs.fetch_first(conn, **where) == (version, read)
    return version, read


@pytest.mark.parametrize("setup", [_whole, _spilled, _respilled, _superseded, _evicted])
async def test_a_change_to_any_row_the_read_depends_on_changes_the_version(
    conn: Any, setup: Callable[[Any], Awaitable[None]]
) -> None:
    await setup(conn)
    changes = []
    for table in TABLES:
        for (ctid,) in await conn.fetch(
            f"SELECT ctid FROM {table} WHERE tenant = $1 AND session_id = $2", T, S
        ):
            changes.append(f"DELETE FROM {table} WHERE ctid = '{ctid}'")
            if table == "messages":
                changes.append(f"UPDATE messages SET superseded_at = now() WHERE ctid = '{ctid}'")
    assert changes
    for handle in ("c1", "c1@2"):
        version, read = await _answers(conn, handle)
        for change in changes:
            try:
                async with conn.transaction():
                    await conn.execute(change)
                    changed = await _answers(conn, handle)
                    raise _Undo(changed)
            except _Undo as undo:
                new_version, new_read = undo.args[0]
            if new_read != read:
                assert new_version != version, (handle, change, read, new_read)
