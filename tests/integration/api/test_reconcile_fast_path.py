"""History reconciliation by hash chain (DESIGN §4), end to end: the common case.

A history resent plus new messages costs a fixed number of statements, whatever its length,
and inserts only the new rows; a divergence costs one extra lookup; no lock or lease outlives
its request. A resent body is parsed only past the previous request's messages, and later
turns send the stored form of what the proxy changed (redacted, cut, the stored reply).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.cascade.types import MESSAGE_APPENDED, USAGE
from proxy.settings import Settings
from proxy.store import leases, messages as msgs, steps, summaries, writes
from tests.fakes.replies import context_length_exceeded, error, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import wait_until
from tests.integration.api.reconcile_helpers import (
    MODEL,
    QueryLog,
    history,
    only,
    post,
    session_view,
    settled,
    statements,
    user,
)
from tests.integration.conftest import column, execute, run_sync


@pytest.fixture
def app_client(db_dsn: str, config_path: Path) -> Iterator[TestClient]:
    """The app in-process: requests (and their background work) finish before returning."""
    settings = Settings(database_url=db_dsn, config=config_path, watch_config=False)
    headers = {"authorization": "Bearer sk-test-client"}
    with TestClient(create_app(settings), headers=headers) as c:
        yield c


def advisory_locks(dsn: str) -> int:
    """Advisory locks any backend holds in this database (the session lock must not outlive
    its request)."""

    async def count() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return int(
                await conn.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database ="
                    " (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            )
        finally:
            await conn.close()

    return int(run_sync(count()))


def held_leases(dsn: str) -> int:
    """Sessions whose lease is held (a request's lease must not outlive it)."""

    async def count() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return int(
                await conn.fetchval("SELECT count(*) FROM sessions WHERE lease_owner IS NOT NULL")
            )
        finally:
            await conn.close()

    return int(run_sync(count()))


# lease + session (+ latest summary) + append + window + events, [upstream], reply + head +
# usage + events + the lease's release; releasing the connection costs no statement.
COMMON = [
    steps.BEGIN_STEP,  # this replica's guess of the stored head was right: appends too
    steps.RECORD_STEP,  # + the reply's and usage events, and the lease's release
]
# without a (right) guess the append is a statement of its own; for a session with nothing
# stored it goes in with the step's decisions (services.history: held back)
UNGUESSED = [steps.BEGIN_STEP, writes.APPEND, steps.RECORD_STEP]


def test_extending_history_costs_constant_statements(app_client: TestClient, db_dsn: str) -> None:
    log = QueryLog(app_client.app_state["chat"].pool)
    app_client.app_state["chat"].pool = log
    per_size: dict[int, list[str]] = {}
    for n in (10, 50, 200):
        sid = f"grow-{n}"
        base = history(n)
        log.queries.clear()
        first = post(app_client, sid, base)
        # a long history this replica has never seen: no guess, so a separate append
        assert statements(log) == UNGUESSED
        answer = first["choices"][0]["message"]
        log.queries.clear()
        post(app_client, sid, [*base, answer, user("next step")])
        per_size[n] = statements(log)
        # only the new user message is stored with the history, then the reply; no lookup
        # of a divergence point
        begin = only(log, steps.BEGIN_STEP)
        start, rows, events = begin.args[5], begin.args[11], begin.args[14]
        assert (start, [r["pos"] for r in rows]) == (n + 1, [n + 1])  # guessed head, new pos
        assert only(log, steps.RECORD_STEP).args[2] == n + 2
        # the request's events ride in those two statements, in order
        published = [[e["name"] for e in events], only(log, steps.RECORD_STEP).args[9]]
        assert published == [[MESSAGE_APPENDED], [MESSAGE_APPENDED, USAGE]]
        assert not any(q.query == writes.PERSIST_STEP for q in log.queries)
        assert msgs.FETCH_MATCHED_LEN not in per_size[n]
        assert msgs.SUPERSEDE_FROM not in per_size[n]
        view = session_view(app_client, sid)
        assert (view["message_count"], view["superseded_count"]) == (n + 3, 0)
        # no statement of its own frees the lease, yet it is free once the request is done;
        # and no advisory lock is taken at all
        assert advisory_locks(db_dsn) == 0 and held_leases(db_dsn) == 0
    assert per_size[10] == per_size[50] == per_size[200] == COMMON


def test_a_named_sessions_resent_history_is_parsed_once(
    app_client: TestClient, fake_upstream: FakeUpstream
) -> None:
    """The body of an extending request is decoded only past the previous one's messages
    (services.resent); what the provider sees and what is stored are unchanged, and an edit
    falls back to a full parse."""
    sid = "parsed-once"
    bodies = app_client.app_state["chat"].bodies

    def cached() -> Any:
        (entry,) = [e for k, e in bodies._entries.items() if k[1] == sid]
        return entry.body["messages"]

    base = [{"role": "system", "content": "rules " * 2000}, *history(9)]  # > 8 KB
    answer = post(app_client, sid, base)["choices"][0]["message"]
    first = cached()
    extended = [*base, answer, user("next step")]
    post(app_client, sid, extended)
    assert cached()[0] is first[0] and cached()[-1] == user("next step")
    assert fake_upstream.bodies()[-1]["messages"] == extended
    edited = [base[0], user("a different start"), *extended[2:]]
    post(app_client, sid, edited)
    assert fake_upstream.bodies()[-1]["messages"] == edited
    assert cached()[0] is not first[0]  # parsed in full
    settled(app_client, sid, len(edited) + 1)
    live = app_client.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert [r["message"] for r in live][:-1] == edited


def verbatim_flags(dsn: str, sid: str) -> list[bool]:
    async def read() -> list[bool]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT verbatim FROM messages WHERE session_id = $1"
                " AND superseded_at IS NULL ORDER BY pos",
                sid,
            )
            return [r["verbatim"] for r in rows]
        finally:
            await conn.close()

    return list(run_sync(read()))


def test_later_turns_send_the_stored_form_of_what_the_proxy_changed(
    app_client: TestClient, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """Rows stored as the client sent them are marked verbatim and read back without their
    body (migration 0006); a redacted message, a cut tool result and the stored reply are
    not, so every later prompt still carries the stored form of those, never the client's."""
    sid, secret = "verbatim", "sk-proj-" + "Q7" * 20
    fake_upstream.script(reply("a1"), reply("a2"), reply("a3"))
    call = {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    base = [
        {"role": "system", "content": "be brief"},
        user(f"use the key {secret}"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "".join(f"line {i}\n" for i in range(10_000)),
        },
        user("what now?"),
    ]
    post(app_client, sid, base)
    first = fake_upstream.bodies()[-1]["messages"]
    assert secret not in first[1]["content"] and "[... truncated" in first[3]["content"]
    history = [*base, {"role": "assistant", "content": "a1"}, user("and then?")]
    for turn in (history, [*history, {"role": "assistant", "content": "a2"}, user("end")]):
        post(app_client, sid, turn)
        sent = fake_upstream.bodies()[-1]["messages"]
        assert sent[:5] == first  # the stored forms, exactly as the first prompt had them
        # user turns as sent; replies in the form stored from the provider
        assert [(m["role"], m["content"]) for m in sent[5:]] == [
            (m["role"], m["content"]) for m in turn[5:]
        ]
        assert [m for m in sent[5:] if m["role"] == "user"] == turn[6::2]
        assert secret not in json.dumps(sent)
    settled(app_client, sid, 10)
    assert verbatim_flags(db_dsn, sid) == [
        True,
        False,
        True,
        False,
        True,
        False,
        True,
        False,
        True,
        False,
    ]


def test_a_request_that_never_stores_a_reply_frees_its_lease(
    app_client: TestClient, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """No RECORD_STEP, so no release in it: the turn's abort frees the lease in a statement
    of its own (what the pool's reset statement did for the advisory lock before)."""
    log = QueryLog(app_client.app_state["chat"].pool)
    app_client.app_state["chat"].pool = log
    fake_upstream.script(error(500), reply("after"))
    resp = app_client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [user("q")]},
        headers={"x-session-id": "failing"},
    )
    assert resp.status_code == 500
    # a one-message history is guessed new: the append rides in the first statement
    assert statements(log) == [steps.BEGIN_STEP, leases.RELEASE_LEASE]
    assert advisory_locks(db_dsn) == 0 and held_leases(db_dsn) == 0
    log.queries.clear()
    post(app_client, "failing", [user("q")])  # the next request on it is not blocked
    assert statements(log) == COMMON


def test_a_refusal_for_length_costs_no_statement_more_and_a_retry_adds_nothing(
    app_client: TestClient, fake_upstream: FakeUpstream
) -> None:
    """The calibration a provider's refusal for length teaches rides in the release of the
    lease (services.window_learned); the same refused request again stores nothing more."""
    log = QueryLog(app_client.app_state["chat"].pool)
    app_client.app_state["chat"].pool = log
    fake_upstream.script(context_length_exceeded(), context_length_exceeded())
    body = {"model": MODEL, "messages": [user("q")]}
    learned = []
    for _ in range(2):
        log.queries.clear()
        resp = app_client.post("/v1/chat/completions", json=body, headers={"x-session-id": "long"})
        assert resp.status_code == 400
        assert statements(log) == [steps.BEGIN_STEP, leases.RELEASE_LEASE]
        learned.append(only(log, leases.RELEASE_LEASE).args[3])
    # a prompt this short is far below the window: the ratio goes to its cap at once, and
    # the retry, already counted there, has nothing to raise
    assert learned == [2.0, None]
    view = session_view(app_client, "long")
    assert view["message_count"] == 1 and view["calibration"] == 2.0


def test_divergence_is_one_extra_lookup(app_client: TestClient) -> None:
    log = QueryLog(app_client.app_state["chat"].pool)
    app_client.app_state["chat"].pool = log
    base = history(30)
    post(app_client, "edited", base)
    log.queries.clear()
    edited = [*base[:10], user("an edited question"), *base[11:]]
    post(app_client, "edited", edited)
    # the common statements plus: divergence lookup, supersede, summary invalidation and
    # refetch (the upsert's summary may have been invalidated by the edit)
    assert statements(log) == [
        steps.BEGIN_STEP,  # the stored head is not a prefix of the edit: no guess
        msgs.FETCH_MATCHED_LEN,
        msgs.SUPERSEDE_FROM,
        summaries.INVALIDATE_AFTER,
        summaries.FETCHROW_LATEST,
        writes.APPEND,
        steps.RECORD_STEP,
    ]
    assert [r["pos"] for r in only(log, writes.APPEND).args[10]] == list(range(10, 30))
    assert only(log, steps.RECORD_STEP).args[2] == 30
    first = only(log, writes.APPEND)
    assert [e["name"] for e in first.args[14]] == [MESSAGE_APPENDED]
    data = first.args[14][0]["data"]
    assert (data["from_pos"], data["count"], data["superseded"]) == (10, 20, 21)
    view = session_view(app_client, "edited")
    assert (view["message_count"], view["superseded_count"]) == (31, 21)


def test_a_session_owing_a_promotion_costs_the_extending_request_no_statement(
    app_client: TestClient, db_dsn: str
) -> None:
    """The mark rides in the row ``begin_step`` returns: owed and not due, nothing reads it
    again; due, its takeover runs apart from the step, on a connection of its own."""
    log = QueryLog(app_client.app_state["chat"].pool)
    app_client.app_state["chat"].pool = log
    base = history(6)
    answer = post(app_client, "owing", base)["choices"][0]["message"]
    owe = "UPDATE sessions SET promotion_from = 1, promotion_to = 3, promotion_due = now() + {}"
    run_sync(execute(db_dsn, owe.format("interval '1 hour'")))
    log.queries.clear()
    base = [*base, answer, user("next step")]
    answer = post(app_client, "owing", base)["choices"][0]["message"]
    assert statements(log) == COMMON
    run_sync(execute(db_dsn, owe.format("interval '0'")))
    log.queries.clear()
    post(app_client, "owing", [*base, answer, user("and the next")])
    assert statements(log) == COMMON
    owed = "SELECT promotion_due > now() OR promotion_due IS NULL FROM sessions"
    wait_until(lambda: column(db_dsn, owed) == [True], what="the owed promotion taken over")
