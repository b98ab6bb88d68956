"""proxy/store/embeddings.py against a real PostgreSQL + pgvector: claims never hand one
message to two embedders, a released claim is claimed again, and the search is scoped to
one tenant's session, one model and its dimension, outside the prompt only."""

from __future__ import annotations

import asyncpg

from proxy.store import embeddings as store
from tests.integration.store.helpers import create_session

MODEL = "m"


async def _session(pool: asyncpg.Pool, tenant: str, sid: str, texts: list[str]) -> None:
    async with pool.acquire() as conn:
        await create_session(conn, tenant=tenant, session_id=sid, agent="ret", model=None)
        for pos, text in enumerate(texts):
            await conn.execute(
                "INSERT INTO messages (tenant, session_id, pos, hash, role, message)"
                " VALUES ($1, $2, $3, 'h', 'user', $4)",
                tenant,
                sid,
                pos,
                {"role": "user", "content": text},
            )


async def _claim(pool: asyncpg.Pool, limit: int = 10) -> list[store.Claimed]:
    async with pool.acquire() as conn:
        claimed, _, _ = await store.claim_unembedded(
            conn,
            model=MODEL,
            after_id=0,
            agents=["ret"],
            configured=["ret"],
            default_on=False,
            limit=limit,
        )
    return claimed


async def test_instructions_are_not_claimed(pool: asyncpg.Pool) -> None:
    """A system or developer message is the client's instructions, which every prompt
    carries: neither is embedded for retrieval, whatever its position."""
    await _session(pool, "t", "s", ["a question"])
    async with pool.acquire() as conn:
        for pos, role in ((1, "system"), (2, "developer")):
            await conn.execute(
                "INSERT INTO messages (tenant, session_id, pos, hash, role, message)"
                " VALUES ('t', 's', $1, 'h', $2, $3)",
                pos,
                role,
                {"role": role, "content": "Be brief."},
            )
    assert [c.message["role"] for c in await _claim(pool)] == ["user"]


async def test_a_claimed_message_is_not_claimed_again_until_released(
    pool: asyncpg.Pool,
) -> None:
    await _session(pool, "t", "s", [f"message {i}" for i in range(6)])
    first, second = await _claim(pool, 4), await _claim(pool, 4)
    assert len(first) == 4 and len(second) == 2
    assert not {c.message_id for c in first} & {c.message_id for c in second}
    assert await _claim(pool) == []
    async with pool.acquire() as conn:
        await store.release_claims(conn, model=MODEL, ids=[c.message_id for c in second])
    again = await _claim(pool)
    assert {c.message_id for c in again} == {c.message_id for c in second}
    # a session whose agent has retrieval off is never claimed
    await _session(pool, "t", "other-agent", ["x"])
    async with pool.acquire() as conn:
        await conn.execute("UPDATE sessions SET agent = 'plain' WHERE id = 'other-agent'")
    assert await _claim(pool) == []


async def test_the_search_reads_one_session_one_model_outside_the_prompt(
    pool: asyncpg.Pool,
) -> None:
    for tenant, sid in (("t", "s"), ("t", "s2"), ("u", "s")):
        await _session(pool, tenant, sid, ["old fact", "older fact", "in the prompt"])
    async with pool.acquire() as conn:
        for tenant, sid in (("t", "s"), ("t", "s2"), ("u", "s")):
            await conn.execute(
                "INSERT INTO summaries (tenant, session_id, version, boundary, content)"
                " VALUES ($1, $2, 1, 2, 'summary')",
                tenant,
                sid,
            )
    claimed = await _claim(pool, 20)
    assert len(claimed) == 9
    by_id = {c.message_id: c for c in claimed}
    rows = await pool.fetch(
        "SELECT id, tenant, session_id, pos FROM messages WHERE id = ANY($1::bigint[])",
        list(by_id),
    )
    vectors = [[1.0, 0.0, 0.0] if r["pos"] != 1 else [0.0, 1.0, 0.0] for r in rows]
    async with pool.acquire() as conn:
        await store.update_embeddings(
            conn, model=MODEL, ids=[r["id"] for r in rows], vectors=vectors
        )
        # another model's vectors of another dimension in the same session never mix in
        await conn.execute(
            "INSERT INTO message_embeddings (message_id, model, tenant, session_id, pos, dim,"
            " embedding) SELECT id, 'other', tenant, session_id, pos, 2, '[1,0]'::vector"
            " FROM messages"
        )
        found = await store.search_outside_prompt(
            conn,
            tenant="t",
            session_id="s",
            model=MODEL,
            vector=[1.0, 0.0, 0.0],
            min_score=-1.0,
            limit=10,
        )
        assert [(f.pos, f.origin, round(f.score, 3)) for f in found] == [
            (0, "summarised", 1.0),
            (1, "summarised", 0.0),
        ]
        best = await store.search_outside_prompt(
            conn,
            tenant="t",
            session_id="s",
            model=MODEL,
            vector=[1.0, 0.0, 0.0],
            min_score=0.5,
            limit=10,
        )
        assert [f.pos for f in best] == [0]
        # an evicted message after the boundary is outside the prompt too
        await conn.execute(
            "UPDATE messages SET placeholder = '{}'::json"
            " WHERE tenant = 't' AND session_id = 's' AND pos = 2"
        )
        found = await store.search_outside_prompt(
            conn,
            tenant="t",
            session_id="s",
            model=MODEL,
            vector=[1.0, 0.0, 0.0],
            min_score=0.5,
            limit=10,
        )
        assert sorted((f.pos, f.origin) for f in found) == [(0, "summarised"), (2, "evicted")]


async def test_an_evicted_message_folded_since_is_found_as_summarised(
    pool: asyncpg.Pool,
) -> None:
    """A result evicted and then folded into the summary is in no prompt as either: the
    search calls it ``summarised``, as ``/messages`` does, and one evicted after the
    boundary stays ``evicted``. The previous function keeps its answer for a replica still
    on the previous code during a rolling upgrade."""
    await _session(pool, "t", "s", ["folded after eviction", "folded", "evicted after"])
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO summaries (tenant, session_id, version, boundary, content)"
            " VALUES ('t', 's', 1, 2, 'summary')"
        )
        await conn.execute(
            "UPDATE messages SET placeholder = '{}'::json, evicted_at = now()"
            " WHERE tenant = 't' AND session_id = 's' AND pos IN (0, 2)"
        )
    claimed = await _claim(pool)
    async with pool.acquire() as conn:
        await store.update_embeddings(
            conn,
            model=MODEL,
            ids=[c.message_id for c in claimed],
            vectors=[[1.0, 0.0] for _ in claimed],
        )
        found = await store.search_outside_prompt(
            conn,
            tenant="t",
            session_id="s",
            model=MODEL,
            vector=[1.0, 0.0],
            min_score=0.5,
            limit=10,
        )
        old = await conn.fetch(
            "SELECT pos, origin FROM cascade_related('t', 's', $1, '[1,0]'::vector, 0.5, 10)",
            MODEL,
        )
    assert sorted((f.pos, f.origin, f.cleared) for f in found) == [
        (0, "summarised", True),
        (1, "summarised", False),
        (2, "evicted", True),
    ]
    assert sorted((r["pos"], r["origin"]) for r in old) == [
        (0, "evicted"),
        (1, "summarised"),
        (2, "evicted"),
    ]
