"""A deleted fact leaves the kept ``<memory>`` block of the turns that list it
(``store.memory.delete_fact``), and only of those: a block whose lines hold the fact's text
inside a longer fact keeps its bytes (a cleared block is one more cache miss), and the
turns that cannot show it are not read."""

from __future__ import annotations

import json
from typing import Any

from proxy.cascade.memory_block import render_memory
from proxy.cascade.phases import kept_text
from proxy.store import memory as store
from tests.integration.store.helpers import T


class Reading:
    """The connection, noting how many turns each read of them answers."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.turns = conn, list[int]()
        self.transaction, self.execute, self.fetchrow = (
            conn.transaction,
            conn.execute,
            conn.fetchrow,
        )

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        rows = list(await self.conn.fetch(query, *args))
        if query == store.SHOWING_TURNS:
            self.turns.append(len(rows))
        return rows


async def _turn(conn: Any, session: str, facts: list[str]) -> None:
    kept = {"memory": {"block": render_memory(facts), "step": 1}, "recitation": None}
    await conn.execute(
        "INSERT INTO sessions (tenant, id, turn_key, turn_blocks) VALUES ($1, $2, 'k', $3)",
        T,
        session,
        kept_text(kept),
    )


async def _blocks(conn: Any) -> dict[str, Any]:
    rows = await conn.fetch(
        "SELECT id, turn_blocks FROM sessions WHERE tenant = $1 AND turn_key = 'k'", T
    )
    return {row["id"]: json.loads(row["turn_blocks"]) for row in rows}


async def test_only_the_turns_that_list_the_fact_are_read_and_cleared(conn: Any) -> None:
    fact_id = await conn.fetchval(
        "INSERT INTO memory (tenant, scope, fact) VALUES ($1, 'global', 'Port 8443') RETURNING id",
        T,
    )
    await _turn(conn, "lists", ["The build uses uv", "Port 8443"])
    await _turn(conn, "longer", ["The proxy listens on Port 8443"])
    await _turn(conn, "other", ["The build uses uv"])
    reading = Reading(conn)
    assert await store.delete_fact(reading, tenant=T, fact_id=fact_id, check=lambda _: None)
    blocks = await _blocks(conn)
    assert blocks["lists"] == {"recitation": None} and reading.turns == [1]
    assert "Port 8443" in blocks["longer"]["memory"]["block"]
    assert blocks["other"]["memory"]["block"] == render_memory(["The build uses uv"])


async def test_a_fact_beyond_ascii_is_found_as_the_kept_json_spells_it(conn: Any) -> None:
    fact = "The café opens at 9 \U0001f600"
    fact_id = await conn.fetchval(
        "INSERT INTO memory (tenant, scope, fact) VALUES ($1, 'global', $2) RETURNING id", T, fact
    )
    await _turn(conn, "lists", [fact])
    assert await store.delete_fact(conn, tenant=T, fact_id=fact_id, check=lambda _: None)
    assert await _blocks(conn) == {"lists": {"recitation": None}}
