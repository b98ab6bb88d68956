"""A page of a stored tool output after the first costs the page, not the copy
(``services.raw_cache``): the text read and redacted for one page is kept under the version
of the rows it was read from, and the next page reads only that version. Pages are the ones
a fresh read of the whole copy gives, a secret across a page's edge replaced on both sides,
and a row written since is read anew."""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from bench.raw_pages import Counting, before, hostile
from proxy.cascade.paging import raw_output_page
from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from proxy.services import raw_cache, toolloop
from proxy.store import messages as msgs, nul
from tests.integration.store.helpers import (
    S,
    T,
    create_session,
    insert_messages,
    rows_for,
    tool_history,
)

PATTERNS = compile_patterns(())
MAX = 2000
SECRET = "sk-proj-" + "".join(random.Random(3).choices(string.ascii_letters + string.digits, k=40))


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    raw_cache.clear()
    yield
    raw_cache.clear()


async def _spill(conn: Any, text: str) -> None:
    """The result cut at ingestion (its row holds the cut), its whole text spilled."""
    rows = rows_for(tool_history(text))
    rows[2] = replace(rows[2], message=tool_history(text[:50] + " [cut]")[2])
    await insert_messages(conn, tenant=T, session_id=S, rows=rows)
    await _respill(conn, text)


async def _respill(conn: Any, text: str) -> None:
    await conn.execute(
        "INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content,"
        " original_bytes) VALUES ($1, $2, 'c1', $3, $4)",
        T,
        S,
        text,
        len(text.encode()),
    )


async def _page(conn: Any, offset: int, handle: str = "c1", patterns: Any = PATTERNS) -> str:
    page = await toolloop.read_page(
        conn,
        tenant=T,
        session_id=S,
        tool_call_id=handle,
        offset=offset,
        max_chars=MAX,
        patterns=patterns,
    )
    assert page is not None
    return page


def _body(page: str) -> str:
    return page.split("\n", 1)[1].split("\n[... more: read_tool_output(")[0]


async def test_a_later_page_fetches_the_rows_version_not_the_copy(conn: Any) -> None:
    text = hostile(120_000)
    await _spill(conn, text)
    counting = Counting(conn)
    first = await _page(counting, 0)
    assert counting.chars >= len(text)  # the first read reads the whole copy
    for offset in (1900, 119_000):
        counting.chars = 0
        page = await _page(counting, offset)
        assert counting.chars < 300, counting.chars
        assert page == await before(conn, S, "c1", offset, MAX, PATTERNS, tenant=T)
    assert first == await before(conn, S, "c1", 0, MAX, PATTERNS, tenant=T)


async def test_a_later_page_of_an_id_used_every_turn_fetches_a_short_version(conn: Any) -> None:
    # A server that numbers its calls call_0 each turn leaves a row under the id per turn
    # (superseded ones included): the version names them all, and sends a digest of them.
    await conn.execute(
        "INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id,"
        " superseded_at) SELECT $1, $2, 2, md5(g::text), 'tool', '{}', 'c1', now()"
        " FROM generate_series(1, 300) AS g",
        T,
        S,
    )
    await _spill(conn, hostile(20_000))
    await _page(conn, 0)
    counting = Counting(conn)
    await _page(counting, 1900)
    assert counting.chars < 300, counting.chars


@pytest.mark.parametrize("before_edge", [20, 8, 1])
async def test_a_secret_across_a_page_edge_is_replaced_on_both_pages(
    conn: Any, before_edge: int
) -> None:
    filler = "".join(f"line {i:05d} of the build log\n" for i in range(400))
    head = raw_output_page(filler, id="c1", max_chars=MAX)[1]
    assert head is not None
    cut = head - before_edge - len(" key ")
    text = filler[:cut] + f" key {SECRET} " + filler[cut:]  # the edge falls in the secret
    await _spill(conn, text)
    counting = Counting(conn)
    one = await _page(counting, 0)
    edge = int(one.rsplit('"offset": ', 1)[1].split("}")[0])
    counting.chars = 0
    two = await _page(counting, edge)
    assert counting.chars < 300  # the second page came from the text kept, not a new read
    for page in (one, two):
        assert not any(SECRET[i : i + 6] in page for i in range(len(SECRET) - 5)), page
    assert REDACTED in _body(one) + _body(two)
    redacted = redact(text, PATTERNS)[0]
    assert _body(one) + _body(two) == redacted[: len(_body(one)) + len(_body(two))]


async def test_a_row_written_since_is_read_anew(conn: Any) -> None:
    await _spill(conn, "first output " * 400)
    assert "first output" in await _page(conn, 0)
    await _respill(conn, "second output " * 400)  # the id's newest spill replaces it
    assert "second output" in await _page(conn, 0)
    await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=1)
    assert await _page(conn, 0) == await before(conn, S, "c1", 0, MAX, PATTERNS, tenant=T)


async def test_a_session_deleted_and_made_again_under_its_id_reads_anew(conn: Any) -> None:
    await _spill(conn, "first output " * 400)
    assert "first output" in await _page(conn, 0)
    await conn.execute("DELETE FROM sessions WHERE tenant = $1 AND id = $2", T, S)
    await create_session(conn, tenant=T, session_id=S, agent="default", model="m")
    await _spill(conn, "second output " * 400)  # the same tenant, session and call id
    assert "second output" in await _page(conn, 0)


async def test_a_kept_text_is_per_patterns(conn: Any) -> None:
    await _spill(conn, f"token {SECRET} " + "x" * 5000)
    assert SECRET not in await _page(conn, 0)
    assert SECRET in await _page(conn, 0, patterns=())  # the tool-outputs API's unredacted read


async def test_a_custom_pattern_changed_by_a_reload_reads_anew(conn: Any) -> None:
    await _spill(conn, "build ok; internal id acme-7f3k2 and acme-9q " + "x" * 5000)
    wide = compile_patterns([r"acme-[0-9a-z]+"])
    assert "acme-" not in await _page(conn, 0, patterns=wide)
    narrow = compile_patterns([r"acme-[0-9a-z]{5}"])  # the same config, its pattern edited
    page = await _page(conn, 0, patterns=narrow)
    assert "acme-7f3k2" not in page and "acme-9q" in page


async def test_a_pinned_handles_later_page_fetches_only_the_version(conn: Any) -> None:
    text = "".join(f"{i:06d} whole result line\n" for i in range(8000))
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(tool_history(text)))
    await _page(conn, 0, handle="c1@2")
    counting = Counting(conn)
    page = await _page(counting, 5000, handle="c1@2")
    assert counting.chars < 300
    assert page == await before(conn, S, "c1@2", 5000, MAX, PATTERNS, tenant=T)


async def test_a_truncation_event_under_a_superseded_result_is_read_anew(conn: Any) -> None:
    # A superseded row is judged whole by the context.truncated events under its id
    # (test_raw_output_whole.py): one written since the text was kept makes it no result.
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(tool_history("whole " * 500)))
    await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=1)
    assert "whole" in await _page(conn, 0)
    await conn.execute(
        "INSERT INTO events (tenant, session_id, name, data) VALUES ($1, $2, $3, $4)",
        T,
        S,
        "context.truncated",
        {"tool_call_id": "c1"},
    )
    found = await toolloop.read_page(
        conn, tenant=T, session_id=S, tool_call_id="c1", max_chars=MAX, patterns=PATTERNS
    )
    assert found is None


@pytest.mark.parametrize("kept", ["evicted", "spilled"])
async def test_an_evicted_body_and_a_spill_with_nuls_page_as_before(conn: Any, kept: str) -> None:
    text = "".join(f"{i:05d}\x00 binary-ish \uffff line\n" for i in range(3000))
    if kept == "spilled":
        rows = rows_for(tool_history(text))
        rows[2] = replace(rows[2], message=tool_history(text[:50] + " [cut]")[2])
        await insert_messages(conn, tenant=T, session_id=S, rows=rows)
        await _respill(conn, nul.encode(text))
    else:
        await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(tool_history(text)))
        await conn.execute(
            "UPDATE messages SET placeholder = $3, evicted_at = now()"
            " WHERE tenant = $1 AND session_id = $2 AND pos = 2",
            T,
            S,
            {"role": "tool", "tool_call_id": "c1", "content": "[evicted]"},
        )
    assert await _page(conn, 0) == await before(conn, S, "c1", 0, MAX, PATTERNS, tenant=T)
    counting = Counting(conn)
    page = await _page(counting, 40_000)
    assert counting.chars < 300
    assert "\x00" in page
    assert page == await before(conn, S, "c1", 40_000, MAX, PATTERNS, tenant=T)


async def test_a_row_updated_in_the_reads_own_transaction_is_read_anew(conn: Any) -> None:
    # A row a transaction wrote keeps that transaction's xmin through its later updates in
    # it (and a row it writes again keeps its key): the version names where each row
    # version lies (ctid) too.
    async with conn.transaction():
        rows = rows_for(tool_history("whole " * 500))
        await insert_messages(conn, tenant=T, session_id=S, rows=rows)
        assert "whole" in await _page(conn, 0)
        await conn.execute(
            "UPDATE messages SET redacted = true WHERE tenant = $1 AND session_id = $2 AND pos = 2",
            T,
            S,
        )
        assert await before(conn, S, "c1", 0, MAX, PATTERNS, tenant=T) is None
        found = await toolloop.read_page(
            conn, tenant=T, session_id=S, tool_call_id="c1", max_chars=MAX, patterns=PATTERNS
        )
        assert found is None


async def test_a_spill_written_again_in_the_reads_own_transaction_is_read_anew(conn: Any) -> None:
    async with conn.transaction():
        await _spill(conn, "first output " * 400)
        assert "first output" in await _page(conn, 0)
        await conn.execute(
            "DELETE FROM tool_raw_outputs WHERE tenant = $1 AND session_id = $2", T, S
        )
        await _respill(conn, "second output " * 400)  # same key, created_at and xmin
        assert "second output" in await _page(conn, 0)
