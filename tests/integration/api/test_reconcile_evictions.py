"""History reconciliation by hash chain (DESIGN §4), end to end: a step that evicts.

An eviction step stores its decisions in one more statement; a new long session's messages go
in already evicted (and trimmed, when even the evicted prompt overflows), storing what the
two-statement way stores, with the evicted bodies still paging back whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.cascade.types import MESSAGE_APPENDED, USAGE
from proxy.settings import Settings
from proxy.store import steps, writes
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config
from tests.integration.api.reconcile_helpers import (
    QueryLog,
    only,
    post,
    statements,
    user,
)
from tests.integration.conftest import run_sync


def evicting_settings(db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream) -> Settings:
    """A tiny window: a first request's older tool results are over the eviction threshold
    at once, so that very step evicts them (placeholders, the reclaimed count, a
    context.evicted event)."""
    config = write_config(
        tmp_path / "evict.json",
        fake_upstream.url,
        models={"default": {"contextLimit": 4000, "reservedOutput": 200}},
        context={
            "eviction": {
                "atFraction": 0.2,
                "keepRecentRounds": 1,
                "clearAtLeast": 100,
                "minResultTokens": 50,
            },
            "summarize": {"enabled": False},
        },
    )
    return Settings(database_url=db_dsn, config=config, watch_config=False)


def tool_rounds(n: int) -> list[dict[str, Any]]:
    """A user turn, then ``n`` rounds of a read_file call and its 1,200-character result."""
    messages: list[dict[str, Any]] = [user("inspect the repo")]
    for i in range(n):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"{i} " * 600})
    return messages


def test_an_eviction_step_stores_its_decisions_in_one_more_statement(
    db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    settings = evicting_settings(db_dsn, tmp_path, fake_upstream)
    messages = tool_rounds(3)  # 7 messages: a new session this replica guesses empty
    with TestClient(create_app(settings), headers={"authorization": "Bearer sk-t"}) as client:
        log = QueryLog(client.app_state["chat"].pool)
        client.app_state["chat"].pool = log
        post(client, "evicts", messages)
        persisted = only(log, writes.PERSIST_STEP)
        pages = [client.get(f"/v1/sessions/evicts/tool-outputs/c{i}").json() for i in (0, 1)]
    sent = fake_upstream.bodies()[-1]["messages"]
    cleared = [m["tool_call_id"] for m in sent if str(m.get("content")).startswith("[context")]
    assert cleared == ["c0", "c1"]
    assert statements(log) == [steps.BEGIN_STEP, writes.PERSIST_STEP, steps.RECORD_STEP]
    # evicted positions, the reclaimed tokens and the (transient) event, in that statement;
    # no copy of the evicted text (the statement stores none: the rows keep it), yet every
    # byte of it comes back
    assert persisted.args[2] == [2, 4] and "tool_raw_outputs" not in writes.PERSIST_STEP
    assert [p["page"].split("\n", 1)[1] for p in pages] == [f"{i} " * 600 for i in (0, 1)]
    assert [p["total_chars"] for p in pages] == [1200, 1200]
    assert persisted.args[6] > 0 and persisted.args[7] is None  # no persisted event
    assert [json.loads(p)["n"] for p in persisted.args[10]] == ["context.evicted"]


STORED = """
SELECT m.pos, m.hash, m.role, m.message::text, m.placeholder::text, m.tool_call_id, m.tokens,
       m.redacted, m.verbatim, m.source, m.evicted_at IS NOT NULL AS evicted,
       m.trimmed_at IS NOT NULL AS trimmed, m.superseded_at IS NOT NULL AS superseded
FROM messages m WHERE m.session_id = $1 ORDER BY m.pos, m.id
"""
SESSION = """
SELECT head_len, head_hash, system_count, reclaimed_tokens, last_estimate FROM sessions
WHERE id = $1
"""


def function_source(dsn: str, name: str) -> str:
    """The current definition of the SQL function ``name``."""

    async def read() -> str:
        conn = await asyncpg.connect(dsn)
        try:
            return str(await conn.fetchval("SELECT pg_get_functiondef($1::regproc)", name))
        finally:
            await conn.close()

    return run_sync(read())


def stored(dsn: str, sid: str) -> tuple[list[Any], Any, list[str]]:
    """(message rows, session row, event names) of ``sid``, as plain values."""

    async def read() -> tuple[list[Any], Any, list[str]]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = [tuple(r) for r in await conn.fetch(STORED, sid)]
            session = tuple(await conn.fetchrow(SESSION, sid))
            names = [
                r[0]
                for r in await conn.fetch(
                    "SELECT name FROM events WHERE session_id = $1 ORDER BY id", sid
                )
            ]
            return rows, session, names
        finally:
            await conn.close()

    return run_sync(read())


@pytest.mark.parametrize("overflowing", [False, True], ids=["evicts", "evicts-and-trims"])
def test_a_new_long_sessions_evictions_go_in_with_its_messages(
    db_dsn: str,
    tmp_path: Path,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    overflowing: bool,
) -> None:
    """A session whose first request is too long to be guessed new has nothing stored: its
    messages wait for the step, and go in already evicted (and trimmed, when even the
    evicted prompt overflows; services.history). What it stores is what the two-statement
    way stores (the guessed session below: insert, then update), and so is the prompt; the
    evicted bodies still page back whole."""
    settings = evicting_settings(db_dsn, tmp_path, fake_upstream)
    messages = tool_rounds(5)  # 11 messages: more than a session is guessed new with
    if overflowing:  # ~1,500 tokens of user text after each of the first three results
        for i in (7, 5, 3):
            messages.insert(i, user(f"note {i} " + "more " * 1200))
    with TestClient(create_app(settings), headers={"authorization": "Bearer sk-t"}) as client:
        log = QueryLog(client.app_state["chat"].pool)
        client.app_state["chat"].pool = log
        post(client, "held", messages)
        held = statements(log)
        step = only(log, writes.APPEND)
        pages = [client.get(f"/v1/sessions/held/tool-outputs/c{i}").json() for i in range(3)]
        monkeypatch.setattr("proxy.services.incoming.GUESS_NEW_SESSION_MAX", 100)
        log.queries.clear()
        post(client, "updated", messages)
        updated = statements(log)
    assert held == [steps.BEGIN_STEP, writes.APPEND, steps.RECORD_STEP]
    assert updated == [steps.BEGIN_STEP, writes.PERSIST_STEP, steps.RECORD_STEP]
    assert "UPDATE messages" not in function_source(db_dsn, "cascade_append_v2")
    placeholders = step.args[12] or []  # NULL: nothing evicted
    evicted = [i for i, p in enumerate(placeholders) if p is not None]
    assert [messages[i]["role"] for i in evicted] == ["tool"] * len(evicted)
    sent = fake_upstream.bodies()
    assert sent[-1]["messages"] == sent[-2]["messages"]
    assert sum(str(m.get("content")).startswith("[context") for m in sent[-2]["messages"]) == len(
        evicted
    )
    if not overflowing:  # (the guard's cut rounds are not offered back)
        assert [p["page"].split("\n", 1)[1] for p in pages] == [f"{i} " * 600 for i in range(3)]
    rows, session, names = stored(db_dsn, "held")
    assert (rows, session, names) == stored(db_dsn, "updated")
    assert [r[10] for r in rows].count(True) == len(evicted)
    trimmed = [r[0] for r in rows if r[11]]
    assert trimmed == [r["pos"] for r in step.args[10] if r.get("trim")]
    assert bool(trimmed) == overflowing and (overflowing or (evicted and session[3] > 0))
    # ingestion, [the guard's cut], the reply, usage
    assert names == [
        MESSAGE_APPENDED,
        *(["context.trimmed"] * overflowing),
        MESSAGE_APPENDED,
        USAGE,
    ]
