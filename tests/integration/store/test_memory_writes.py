"""A memory write compares a fact with the scope's stored facts through their keys
(``memory.fact_key``, migration 0030): it reads the rows it compares with, not the scope,
the unique index keeps one row per key however the writes race, and facts stored without a
key (before the migration, or by a replica on older code) are keyed before a write."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import asyncpg

from proxy.cascade.memory import fact_key, sanitize_facts
from proxy.store import memory as store
from proxy.store.migrations import MIGRATIONS_DIR
from tests.integration.store.helpers import T


class Counting:
    """The connection, noting how many rows each read answers."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.rows = conn, list[int]()

    def transaction(self) -> Any:
        return self.conn.transaction()

    async def execute(self, query: str, *args: Any) -> Any:
        return await self.conn.execute(query, *args)

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        rows = await self.conn.fetch(query, *args)
        self.rows.append(len(rows))
        return list(rows)


async def _add(conn: Any, texts: Sequence[str], scope: str = "global") -> list[str]:
    def vet(stored: set[str]) -> list[str]:
        return [v.text for v in sanitize_facts(texts, stored_keys=stored) if v.text is not None]

    rows = await store.add_facts(conn, tenant=T, scope=scope, texts=texts, vet=vet)
    return [row["text"] for row in rows]


async def _unkeyed(conn: Any, texts: Sequence[str]) -> None:
    """Store ``texts`` as a replica on the code before migration 0030 does: no key."""
    await conn.execute(
        "INSERT INTO memory (tenant, scope, fact) SELECT $1, 'global', f"
        " FROM unnest($2::text[]) WITH ORDINALITY AS t(f, o) ORDER BY o",
        T,
        list(texts),
    )


async def _keys(conn: Any) -> list[str | None]:
    rows = await conn.fetch("SELECT fact_key FROM memory WHERE tenant = $1 ORDER BY id", T)
    return [row["fact_key"] for row in rows]


async def test_a_write_into_a_large_scope_reads_only_what_it_compares(conn: Any) -> None:
    assert len(await _add(conn, [f"Stage {i} runs the linter" for i in range(2000)])) == 2000
    counting = Counting(conn)
    assert await _add(counting, ["STAGE 7  runs the linter", "The port is 8443"]) == [
        "The port is 8443"
    ]
    assert counting.rows and max(counting.rows) <= 2, counting.rows


async def test_each_stored_fact_holds_its_key(conn: Any) -> None:
    stored = await _add(conn, ["The CAFE\u0301 opens at 9", "ＩＤ is 7"])
    assert await _keys(conn) == [fact_key(text) for text in stored]
    assert await _add(conn, ["the café opens at 9", "id is 7"]) == []


async def test_facts_stored_without_a_key_are_keyed_before_a_write(conn: Any) -> None:
    """Rows from before the migration, or from a replica on older code, may repeat one
    another under today's comparison: the older keeps the key, the repeat gets one of its
    own, and a new spelling of either is still a duplicate."""
    await _unkeyed(conn, ["The build uses uv", "the  build uses UV", "Port 8443"])
    assert await _add(conn, ["THE BUILD USES UV", "Port 9000"]) == ["Port 9000"]
    keys = await _keys(conn)
    assert keys[0] == fact_key("The build uses uv") and keys[2] == fact_key("Port 8443")
    assert keys[1] is not None and keys[1].startswith(store.REPEATED)
    assert keys[3] == fact_key("Port 9000")
    await _unkeyed(conn, ["port 9000"])  # an old replica's duplicate, while it still runs
    assert await _add(conn, ["Port 8443", "The deploy is blue-green"]) == [
        "The deploy is blue-green"
    ]
    assert None not in await _keys(conn)


async def test_concurrent_adds_of_one_fact_store_one_row(pool: asyncpg.Pool, conn: Any) -> None:
    async def add(text: str) -> list[str]:
        async with pool.acquire() as c:
            return await _add(c, [text])

    added = await asyncio.gather(*(add(t) for t in ["The port is 8443", "the port is  8443"] * 3))
    assert sum(map(len, added)) == 1
    assert len(await _keys(conn)) == 1


async def test_a_suggestion_reads_the_keys_it_compares_and_the_unkeyed_facts(conn: Any) -> None:
    """Promotion's ``suggest`` takes no lock: it reads the keys of its candidates and the
    facts not yet keyed, which a write keys, so a keyed scope is read by key alone."""
    await _unkeyed(conn, ["The build uses uv"])
    candidates = ["the build uses UV", "Port 8443"]
    assert await store.stored_matches(conn, tenant=T, scope="global", texts=candidates) == (
        set(),
        ["The build uses uv"],
    )
    await _add(conn, ["PORT 8443"])
    keys, unkeyed = await store.stored_matches(conn, tenant=T, scope="global", texts=candidates)
    assert keys == set(map(fact_key, candidates)) and unkeyed == []


async def test_the_start_keys_stored_facts_a_batch_at_a_time(pool: asyncpg.Pool, conn: Any) -> None:
    """What the proxy runs once it starts: each unkeyed fact is keyed as a write would key
    it, a batch per transaction, the older of two repeats keeping the key."""
    texts = ["The build uses uv", "Port 8443", "the build  uses UV", "Port 9000", "ＰＯＲＴ 9000"]
    await _unkeyed(conn, texts)
    assert await store.key_stored_facts(pool, batch=2) == 3
    keys = await _keys(conn)
    assert [keys[i] for i in (0, 1, 3)] == [fact_key(texts[i]) for i in (0, 1, 3)]
    assert all(k is not None and k.startswith(store.REPEATED) for k in (keys[2], keys[4]))
    assert await store.key_stored_facts(pool) == 0


async def test_a_fact_and_its_closing_full_stop_are_one_fact(conn: Any) -> None:
    assert await _add(conn, ["The build uses uv."]) == ["The build uses uv."]
    assert await _add(conn, ["the build uses UV", "The build uses uv 。", "Port 1…"]) == ["Port 1…"]
    assert await _add(conn, ["Port 1"]) == []


async def test_0033_keys_the_stored_facts_again_keeping_every_row(
    pool: asyncpg.Pool, conn: Any
) -> None:
    """Keys the earlier form made ("x." and "x" apart) are made again: the older of two
    facts that are now one keeps the key, the newer gets one of its own, and both rows
    stay as they were."""
    texts = ["Port 9000.", "The build uses uv", "port 9000", "The build uses uv."]
    old = [" ".join(t.split()).casefold() for t in texts]  # the earlier form: stops kept
    await conn.execute(
        "INSERT INTO memory (tenant, scope, fact, fact_key) SELECT $1, 'global', f, k"
        " FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(f, k, o) ORDER BY o",
        T,
        texts,
        old,
    )
    await conn.execute((MIGRATIONS_DIR / "0033_memory_fact_key_stops.sql").read_text())
    assert await _keys(conn) == [None] * 4
    assert await store.key_stored_facts(pool) == 1
    keys = await _keys(conn)
    assert keys[:2] == [fact_key("Port 9000"), fact_key("The build uses uv")]
    assert all(k is not None and k.startswith(store.REPEATED) for k in keys[2:])
    rows = await conn.fetch("SELECT fact FROM memory WHERE tenant = $1 ORDER BY id", T)
    assert [row["fact"] for row in rows] == texts
    assert await _add(conn, ["PORT 9000 .", "Port 9001."]) == ["Port 9001."]


async def _old_keyed(conn: Any, texts: Sequence[str]) -> None:
    """Store ``texts`` as a replica on the code before migration 0033 keys them, after the
    migration ran too (its write, or its start, keys the rows 0033 cleared): closing full
    stops kept in the key."""
    old = [" ".join(t.split()).casefold() for t in texts]
    await conn.execute(
        "INSERT INTO memory (tenant, scope, fact, fact_key) SELECT $1, 'global', f, k"
        " FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(f, k, o) ORDER BY o",
        T,
        list(texts),
        old,
    )


async def test_a_key_the_earlier_form_made_after_0033_is_made_again(
    pool: asyncpg.Pool, conn: Any
) -> None:
    """A replica still on the code before 0033 keys the rows 0033 cleared (at its write or
    its start) in the earlier form: such a key is read as none, so "X." so keyed still
    keeps out "X", and the start and a write key it again."""
    await _old_keyed(conn, ["Port 9000.", "The build uses uv", "Stops...", "...", "e.g."])
    keys, texts = await store.stored_matches(conn, tenant=T, scope="global", texts=["port 9000"])
    assert texts == ["Port 9000.", "Stops...", "e.g."] and not keys
    assert await _add(conn, ["port 9000", "the build uses uv."]) == []
    assert await _keys(conn) == ["port 9000", "the build uses uv", "stops", "...", "e.g"]
    await _old_keyed(conn, ["Uses pnpm."])
    assert await store.key_stored_facts(pool) == 1
    assert (await _keys(conn))[-1] == "uses pnpm"
    assert await store.key_stored_facts(pool) == 0


async def test_a_batch_of_the_start_reads_its_rows_alone(conn: Any) -> None:
    """Right after 0033 every row is unkeyed, and the planner knows it: still, finding the
    next scope and a scope's next batch walk the index of the rows to key, in order (a walk
    of the table, or of the ids from the first, would read the rows keyed before it again
    at every batch: a large table's keying would grow with its square)."""
    await conn.execute(
        "INSERT INTO memory (tenant, scope, fact) SELECT $1, 'agent:a' || (g % 4), 'F ' || g"
        " FROM generate_series(1, 4000) g",
        T,
    )
    await conn.execute("ANALYZE memory")
    for query, args in ((store.UNKEYED, (T, "agent:a3", 500)), (store.NEXT_UNKEYED, (T, "a"))):
        plan = "\n".join(row[0] for row in await conn.fetch("EXPLAIN " + query, *args))
        assert "memory_unkeyed_stops" in plan and "Sort" not in plan, plan
