"""proxy/store/messages.py against a real, migrated PostgreSQL.

Rows are stored and read back in order, per tenant, as a window (the system prefix and a tail)
or in pages; the longest common prefix is found by hash; superseding keeps the rows and frees
their positions. The message column keeps key order and unknown fields, and json travels whole
in the pool's binary format.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from proxy.history import chain
from proxy.store import messages as msgs
from tests.integration.store.helpers import (
    HISTORY,
    S,
    T,
    create_session,
    insert_messages,
    rows_for,
    user,
)


async def test_insert_then_fetch_messages_in_order(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    rows = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert [r["pos"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["message"] for r in rows] == HISTORY
    assert all(r["source"] == "client" and r["superseded_at"] is None for r in rows)


async def test_messages_are_scoped_by_tenant(conn: Any) -> None:
    await create_session(conn, tenant="t-b", session_id=S, agent="default", model="m")
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    assert await msgs.fetch_messages(conn, tenant="t-b", session_id=S) == []
    other = await msgs.fetch_window(conn, tenant="t-b", session_id=S, system_count=1, from_pos=0)
    assert other == []


async def test_fetch_window_keeps_system_prefix_and_tail(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    rows = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=3)
    assert [r["pos"] for r in rows] == [0, 3, 4]
    assert rows[0]["message"]["role"] == "system"
    full = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=1)
    assert [r["pos"] for r in full] == [0, 1, 2, 3, 4]


async def test_fetch_matched_len_finds_longest_common_prefix(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    same = chain(HISTORY)
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=same) == 5
    edited = chain([*HISTORY[:3], user("THREE (edited)"), HISTORY[4]])
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=edited) == 3
    other = chain([{"role": "system", "content": "different"}, *HISTORY[1:]])
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=other) == 0
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=[]) == 0


async def test_supersede_keeps_rows_and_frees_positions(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    n = await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=3)
    assert n == 2
    live = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert [r["pos"] for r in live] == [0, 1, 2]
    # the superseded hashes no longer match, so a divergence is planned from pos 3
    hashes = chain(HISTORY)
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=hashes) == 3
    # the freed positions accept a new tail (the live-position index is partial)
    new = [*HISTORY[:3], user("three, again")]
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(new, start=3))
    everything = await msgs.fetch_messages(conn, tenant=T, session_id=S, include_superseded=True)
    assert [(r["pos"], r["superseded_at"] is not None) for r in everything] == [
        (0, False),
        (1, False),
        (2, False),
        (3, True),
        (3, False),
        (4, True),
    ]
    # superseding again only touches live rows
    assert await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=3) == 1


async def test_two_live_rows_at_one_position_are_refused(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY[:2]))
    with pytest.raises(asyncpg.UniqueViolationError):
        await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY[:2], 1))


async def test_fetch_messages_pages(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    page = await msgs.fetch_messages(conn, tenant=T, session_id=S, limit=2, offset=2)
    assert [r["pos"] for r in page] == [2, 3]


async def test_the_message_column_keeps_key_order_and_unknown_fields(conn: Any) -> None:
    # json, not jsonb: jsonb would sort the keys ("content" first) on the way back
    odd = {"role": "tool", "tool_call_id": "c1", "zeta": {"b": 1, "a": [2, 1]}, "content": "x"}
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for([user("q"), odd]))
    raw = await conn.fetchval(
        "SELECT message::text FROM messages WHERE tenant = $1 AND session_id = $2 AND pos = 1",
        T,
        S,
    )
    assert list(json.loads(raw)) == ["role", "tool_call_id", "zeta", "content"]
    for rows in (
        await msgs.fetch_messages(conn, tenant=T, session_id=S),
        await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=0, from_pos=0),
    ):
        got = rows[1]["message"]
        assert got == odd and list(got) == list(odd) and list(got["zeta"]) == ["b", "a"]


TRICKY = [
    'quotes " and \\ backslashes, {braces}, [brackets], commas, NULL, ""',
    "unicode é 😀 \u2028 and a tab\t and a newline\n",
    "",
]


async def test_json_and_jsonb_travel_whole_in_binary_arrays(conn: Any) -> None:
    # The pool sends json/jsonb in PostgreSQL's binary format (store/db.py), so a json[]
    # parameter carries each element length-prefixed: every character that needed quoting
    # in the text array format must arrive, and come back, unchanged.
    values = [{"role": "user", "content": text, "n": [1, None, True]} for text in TRICKY]
    got = await conn.fetch(
        "SELECT m, m->>'content' AS content, m::jsonb AS b"
        " FROM unnest($1::json[]) WITH ORDINALITY AS t(m, o) ORDER BY o",
        values,
    )
    assert [r["m"] for r in got] == values
    assert [r["b"] for r in got] == values
    assert [r["content"] for r in got] == TRICKY  # parsed by the server, not just echoed
    assert await conn.fetchval("SELECT $1::jsonb -> 'k'", {"k": "é"}) == "é"


def test_a_jsonb_value_of_an_unknown_format_version_is_refused() -> None:
    from proxy.store.db import _decode_jsonb

    assert _decode_jsonb(b'\x01{"a": 1}') == {"a": 1}
    with pytest.raises(ValueError, match="jsonb format version"):
        _decode_jsonb(b'\x02{"a": 1}')
