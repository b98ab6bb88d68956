"""A turn's ``<memory>`` block reads only the oldest facts it can use, not the scope's whole
list, and is the block the whole list gives (``services.needs.memory_block``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from proxy.cascade.memory_block import MemoryNeed, render_memory
from proxy.services.needs import memory_block
from proxy.session_id import SessionKey
from tests.integration.store.helpers import S, T, create_session

BOUND = 2 * 1000 + 2  # twice the block's cap in tokens, and two


class Counting:
    """The connection, noting how many rows each read answers."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.rows = conn, list[int]()

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        rows = await self.conn.fetch(query, *args)
        self.rows.append(len(rows))
        return list(rows)


async def _store(conn: Any, scope: str | Sequence[str], texts: Sequence[str]) -> None:
    """Store ``texts`` in this order, in ``scope`` (or each in the scope at its index)."""
    scopes = [scope] * len(texts) if isinstance(scope, str) else list(scope)
    await conn.execute(
        "INSERT INTO memory (tenant, scope, fact) SELECT $1, s, f"
        " FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(s, f, o) ORDER BY o",
        T,
        scopes,
        list(texts),
    )


async def _block(conn: Any, session_id: str = S, need: MemoryNeed | None = None) -> Any:
    counting = Counting(conn)
    block = await memory_block(need or MemoryNeed(), counting, SessionKey(T, session_id))
    return block, counting.rows


async def test_a_large_scope_gives_the_same_block_from_a_bounded_read(conn: Any) -> None:
    texts = [f"Fact {i}: the deploy pipeline runs stage {i}." for i in range(3000)]
    await _store(conn, "global", texts)
    block, rows = await _block(conn)
    assert block == render_memory(texts) and block is not None
    assert len(rows) == 1 and rows[0] <= BOUND  # one statement, as before


@pytest.mark.parametrize("max_tokens", [1000, 40])
async def test_facts_in_both_scopes_give_the_same_block(conn: Any, max_tokens: int) -> None:
    """A fact stored in ``global`` and the agent's scope is listed once, so a read of the
    cap's worth of rows would cut the block short; a small model's cap reads fewer rows."""
    await create_session(conn, tenant=T, session_id="coder-run", agent="coder", model="m")
    texts = [f"Fact {i}." for i in range(1500)]
    twice = [text for text in texts for _ in range(2)]  # interleaved by age
    await _store(conn, ["global", "agent:coder"] * len(texts), twice)
    need = MemoryNeed(max_tokens=max_tokens)
    block, rows = await _block(conn, "coder-run", need)
    assert block == render_memory(texts, max_tokens=max_tokens)
    assert len(rows) == 1 and rows[0] <= 2 * max_tokens + 2


async def test_a_scope_holding_one_fact_many_times_is_read_on(conn: Any) -> None:
    """Rows stored before a scope compared facts as it does now may repeat one fact past
    the bounded read; the block still shows the facts after them, from a second read."""
    texts = [f"the port is {' ' * (i % 3)}8443" for i in range(BOUND + 5)] + ["Builds use uv."]
    await _store(conn, "global", texts)
    block, rows = await _block(conn)
    assert block == render_memory(texts) and block is not None and "Builds use uv." in block
    assert rows == [BOUND, 6]
