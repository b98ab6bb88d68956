"""proxy/store/sessions.py against a real, migrated PostgreSQL: a session's row, its usage,
and deleting, resetting and copying what it owns."""

from __future__ import annotations

from datetime import datetime

import asyncpg
import pytest

from proxy.cascade.types import MEMORY_SUGGESTION
from proxy.store import memory_suggestions, messages as msgs, sessions, steps, writes
from tests.integration.store.helpers import A, T, counts, create_session, make_session, set_head


async def test_begin_step_creates_then_touches(pool: asyncpg.Pool) -> None:
    """The request's first statement creates the session, and later updates its agent and
    model without touching its head."""
    async with pool.acquire() as conn:
        begin = {"tenant": T, "session_id": "s", "owner": A}
        first = (await steps.begin_step(conn, agent="a", model="m1", **begin)).session
        assert (first["head_len"], first["head_hash"], first["calibration"]) == (0, None, 1.0)
        await set_head(conn, tenant=T, session_id="s", head_len=4, head_hash="x", system_count=1)
        again = (await steps.begin_step(conn, agent="b", model="m2", **begin)).session
        assert (again["head_len"], again["head_hash"], again["system_count"]) == (4, "x", 1)
        assert (again["agent"], again["model"]) == ("b", "m2")
        when = datetime.fromisoformat
        assert when(again["updated_at"]) >= when(first["updated_at"])
        assert again["created_at"] == first["created_at"]


async def test_fetchrow_session_is_tenant_scoped_and_show_counts_superseded(
    pool: asyncpg.Pool,
) -> None:
    await make_session(pool, "s")
    assert await sessions.fetchrow_session(pool, tenant="t-b", session_id="s") is None
    assert await sessions.fetchrow_session(pool, tenant=T, session_id="nope") is None
    assert await sessions.fetchrow_session(pool, tenant=T, session_id="s") is not None
    assert await sessions.count_superseded(pool, tenant=T, session_id="s") == 0
    await msgs.supersede_from(pool, tenant=T, session_id="s", from_pos=1)
    assert await sessions.count_superseded(pool, tenant=T, session_id="s") == 2
    assert await sessions.count_superseded(pool, tenant="t-b", session_id="s") == 0


async def test_fetch_sessions_newest_first_per_tenant(pool: asyncpg.Pool) -> None:
    for sid in ("old", "mid", "new"):
        await create_session(pool, tenant=T, session_id=sid, agent="a", model="m")
    await create_session(pool, tenant="t-b", session_id="theirs", agent="a", model="m")
    rows = await sessions.fetch_sessions(pool, tenant=T)
    assert [r["id"] for r in rows] == ["new", "mid", "old"]
    page = await sessions.fetch_sessions(pool, tenant=T, limit=1, offset=1)
    assert [r["id"] for r in page] == ["mid"]
    assert [r["id"] for r in await sessions.fetch_sessions(pool, tenant="t-b")] == ["theirs"]


async def test_fetch_sessions_of_some_agents_and_one_sessions_agent(pool: asyncpg.Pool) -> None:
    for sid, agent in (("a-old", "a"), ("b-mid", "b"), ("a-new", "a")):
        await create_session(pool, tenant=T, session_id=sid, agent=agent, model="m")
    rows = await sessions.fetch_sessions(pool, tenant=T, agents=["a", "c"])
    assert [r["id"] for r in rows] == ["a-new", "a-old"]
    page = await sessions.fetch_sessions(pool, tenant=T, agents=["a"], limit=1, offset=1)
    assert [r["id"] for r in page] == ["a-old"]  # the page is cut from the agents' sessions
    assert await sessions.fetch_sessions(pool, tenant=T, agents=["c"]) == []
    assert await sessions.fetchval_agent(pool, tenant=T, session_id="b-mid") == "b"
    assert await sessions.fetchval_agent(pool, tenant="t-b", session_id="b-mid") is None


async def test_update_usage_and_reclaimed(pool: asyncpg.Pool) -> None:
    await create_session(pool, tenant=T, session_id="s", agent="a", model="m")
    await steps.record_step(
        pool,
        tenant=T,
        session_id="s",
        reply=None,
        prompt_tokens=900,
        estimate=1000,
        calibration=0.9,
    )
    for tokens, total in ((50, 50), (25, 75), (0, 75)):
        await writes.persist_step(pool, tenant=T, session_id="s", reclaimed=tokens)
        row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
        assert row is not None and row["reclaimed_tokens"] == total
    row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
    assert row is not None
    assert (row["last_prompt_tokens"], row["last_estimate"], row["calibration"]) == (900, 1000, 0.9)
    assert row["reclaimed_tokens"] == 75
    await steps.record_step(
        pool,
        tenant=T,
        session_id="s",
        reply=None,
        prompt_tokens=None,
        estimate=10,
        calibration=0.9,
    )
    row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
    assert row is not None and row["last_prompt_tokens"] is None


async def test_reclaimed_tokens_of_a_missing_session_create_nothing(pool: asyncpg.Pool) -> None:
    await writes.persist_step(pool, tenant=T, session_id="ghost", reclaimed=5)
    assert await sessions.fetchrow_session(pool, tenant=T, session_id="ghost") is None


async def test_delete_cascades_to_everything_the_session_owns(pool: asyncpg.Pool) -> None:
    await make_session(pool, "doomed")
    await make_session(pool, "kept")
    await make_session(pool, "doomed", tenant="t-b")
    assert await sessions.delete_session(pool, tenant=T, session_id="doomed") is True
    assert await sessions.delete_session(pool, tenant=T, session_id="doomed") is False
    assert await counts(pool, "doomed") == dict.fromkeys(
        ("messages", "tool_raw_outputs", "summaries", "events"), 0
    )
    assert await counts(pool, "kept") == {
        "messages": 3,
        "tool_raw_outputs": 1,
        "summaries": 1,
        "events": 1,
    }
    assert (await counts(pool, "doomed", tenant="t-b"))["messages"] == 3


async def test_delete_takes_the_answers_to_the_sessions_memory_suggestions(
    pool: asyncpg.Pool,
) -> None:
    """An answer names its suggestion, not the session, so no cascade reaches it: the delete
    takes the answers to the session's suggestions, and no one else's."""
    for tenant, session_id, suggestion_id in (
        (T, "doomed", "sug-doomed"),
        (T, "kept", "sug-kept"),
        ("t-b", "doomed", "sug-doomed"),
    ):
        await create_session(pool, tenant=tenant, session_id=session_id, agent="a", model="m")
        data = {"suggestion_id": suggestion_id, "facts": ["Uses uv"]}
        await pool.execute(
            "INSERT INTO events (tenant, session_id, name, data) VALUES ($1, $2, $3, $4)",
            tenant,
            session_id,
            MEMORY_SUGGESTION,
            data,
        )
        await memory_suggestions.answer_suggestion(
            pool, tenant=tenant, suggestion_id=suggestion_id, answer="rejected"
        )
    assert await sessions.delete_session(pool, tenant=T, session_id="doomed") is True
    rows = await pool.fetch("SELECT tenant, suggestion_id FROM memory_suggestion_answers")
    assert sorted(map(tuple, rows)) == [(T, "sug-kept"), ("t-b", "sug-doomed")]


async def test_reset_forgets_history_but_keeps_session_and_events(pool: asyncpg.Pool) -> None:
    await make_session(pool, "s")
    await steps.record_step(
        pool,
        tenant=T,
        session_id="s",
        reply=None,
        prompt_tokens=5,
        estimate=6,
        calibration=0.5,
    )
    await sessions.reset_session(pool, tenant=T, session_id="s")
    assert await counts(pool, "s") == {
        "messages": 0,
        "tool_raw_outputs": 0,
        "summaries": 0,
        "events": 1,
    }
    row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
    assert row is not None
    assert (row["head_len"], row["head_hash"], row["last_prompt_tokens"]) == (0, None, None)
    assert row["calibration"] == 1.0


async def test_copy_session_makes_an_independent_branch(pool: asyncpg.Pool) -> None:
    await make_session(pool, "parent")
    await msgs.supersede_from(pool, tenant=T, session_id="parent", from_pos=2)
    await sessions.copy_session(pool, tenant=T, source="parent", target="child")
    child = await sessions.fetchrow_session(pool, tenant=T, session_id="child")
    assert child is not None
    assert (child["parent_id"], child["head_len"], child["head_hash"]) == ("parent", 3, "h2")
    # live messages, raw outputs and summaries are copied; superseded rows and events are not
    assert await counts(pool, "child") == {
        "messages": 2,
        "tool_raw_outputs": 1,
        "summaries": 1,
        "events": 0,
    }
    # changing the branch leaves the parent as it was
    await msgs.supersede_from(pool, tenant=T, session_id="child", from_pos=0)
    await sessions.delete_session(pool, tenant=T, session_id="child")
    assert await counts(pool, "parent") == {
        "messages": 3,
        "tool_raw_outputs": 1,
        "summaries": 1,
        "events": 1,
    }
    live = await msgs.fetch_messages(pool, tenant=T, session_id="parent")
    assert len(live) == 2


async def test_copy_session_into_existing_id_fails_whole(pool: asyncpg.Pool) -> None:
    await make_session(pool, "a")
    await make_session(pool, "b", n=1)
    with pytest.raises(asyncpg.UniqueViolationError):
        await sessions.copy_session(pool, tenant=T, source="a", target="b")
    assert (await counts(pool, "b"))["messages"] == 1
