"""History reconciliation by hash chain (DESIGN §4), end to end.

- the common case (history resent plus new messages) costs a fixed number of statements,
  whatever the history's length, and inserts only the new rows;
- an edited or regenerated history supersedes the stored tail (kept, visible on request);
- the reply the proxy stored matches what an SDK client sends back (fast path);
- requests on one session are serialised, different sessions run in parallel.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest
from asyncpg import introspection
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.cascade.types import MESSAGE_APPENDED, USAGE
from proxy.settings import Settings
from proxy.store import leases, messages as msgs, steps, summaries, writes
from tests.fakes.upstream import (
    FakeUpstream,
    RecordedRequest,
    Reply,
    error,
    reply,
    tool_call,
)
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.conftest import run_sync

MODEL = "gpt-4o"
_INTROSPECTION = {
    introspection.INTRO_LOOKUP_TYPES,
    introspection.INTRO_LOOKUP_TYPES_13,
    introspection.TYPE_BY_NAME,
}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def history(n: int) -> list[dict[str, Any]]:
    """``n`` messages alternating user/assistant, ending with a user message."""
    out = []
    for i in range(n):
        role = "user" if (n - i) % 2 else "assistant"
        out.append({"role": role, "content": f"message {i} " + "lorem ipsum " * 5})
    return out


def session_view(http: httpx.Client | TestClient, sid: str) -> dict[str, Any]:
    resp = http.get(f"/v1/sessions/{sid}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def live_count(http: httpx.Client, sid: str) -> int:
    resp = http.get(f"/v1/sessions/{sid}/messages")
    assert resp.status_code == 200, resp.text
    return len(resp.json()["data"])


def settled(http: httpx.Client, sid: str, count: int) -> dict[str, Any]:
    """The session once ``count`` live messages are stored and its head says so (the reply of
    a non-streamed request is stored right after the response went out, still under the
    session lock; a regenerate leaves the count where it was, so the head alone can't tell)."""
    deadline = time.monotonic() + 5
    while (view := session_view(http, sid))["message_count"] != count or (
        live_count(http, sid) != count
    ):
        if time.monotonic() > deadline:
            raise AssertionError(f"{sid}: expected {count} live messages, have {view}")
        time.sleep(0.02)
    return view


def all_messages(http: httpx.Client, sid: str) -> list[dict[str, Any]]:
    resp = http.get(f"/v1/sessions/{sid}/messages", params={"include_superseded": "true"})
    assert resp.status_code == 200
    return resp.json()["data"]


def post(http: httpx.Client | TestClient, sid: str, messages: list[Any], **body: Any) -> Any:
    resp = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": messages, **body},
        headers={"x-session-id": sid},
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


# --------------------------------------------------------------------------- O(1) fast path


class QueryLog:
    """Wraps the chat service's pool: every statement run on a lent connection is logged."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.queries: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def _log(self, record: Any) -> None:
        query = record.query
        if query not in _INTROSPECTION and "set_config('jit'" not in query:
            self.queries.append(record)

    async def acquire(self) -> Any:
        conn = await self._pool.acquire()
        conn.add_query_logger(self._log)
        return conn

    async def release(self, conn: Any) -> None:
        raw = conn._con  # the pooled connection behind asyncpg's proxy outlives the release
        await self._pool.release(conn)  # so the pool's reset statements are logged too
        raw.remove_query_logger(self._log)


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


def statements(log: QueryLog) -> list[str]:
    return [q.query for q in log.queries]


def only(log: QueryLog, query: str) -> Any:
    found = [q for q in log.queries if q.query == query]
    assert len(found) == 1, statements(log)
    return found[0]


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


# --------------------------------------------------------------------------- divergence


def test_edit_supersedes_the_tail_from_the_divergence_point(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("a1"), reply("a2"), reply("a2 again"))
    a1 = post(http, "s", [user("u1")])["choices"][0]["message"]
    post(http, "s", [user("u1"), a1, user("u2")])
    settled(http, "s", 4)
    post(http, "s", [user("u1"), a1, user("u2 edited")])
    view = settled(http, "s", 4)
    assert view["superseded_count"] == 2
    live = http.get("/v1/sessions/s/messages").json()["data"]
    assert [r["message"]["content"] for r in live] == ["u1", "a1", "u2 edited", "a2 again"]
    everything = all_messages(http, "s")
    assert [(r["pos"], r["message"]["content"], r["superseded"]) for r in everything] == [
        (0, "u1", False),
        (1, "a1", False),
        (2, "u2", True),
        (2, "u2 edited", False),
        (3, "a2", True),
        (3, "a2 again", False),
    ]
    # the provider saw the edited history, not the superseded one
    assert fake_upstream.bodies()[-1]["messages"][-1] == user("u2 edited")


def test_regenerate_supersedes_the_stored_reply(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("first try"), reply("second try"))
    post(http, "regen", [user("q")])
    settled(http, "regen", 2)
    post(http, "regen", [user("q")])
    assert settled(http, "regen", 2)["superseded_count"] == 1
    rows = all_messages(http, "regen")
    assert [(r["message"]["content"], r["superseded"]) for r in rows] == [
        ("q", False),
        ("first try", True),
        ("second try", False),
    ]


def test_new_opening_supersedes_everything(http: httpx.Client) -> None:
    base = history(6)
    post(http, "fresh", base)
    settled(http, "fresh", 7)
    post(http, "fresh", [user("a different opening")])
    assert settled(http, "fresh", 2)["superseded_count"] == 7
    assert len(all_messages(http, "fresh")) == 9


def test_a_failed_regenerate_leaves_the_head_on_the_live_history(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("first"), error(500), reply("after"))
    first = post(http, "rg", [user("q")])["choices"][0]["message"]
    settled(http, "rg", 2)
    # regenerate: the stored reply is superseded, but the provider fails, so nothing is added
    resp = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [user("q")]},
        headers={"x-session-id": "rg"},
    )
    assert resp.status_code == 500
    assert session_view(http, "rg")["message_count"] == 1
    # the agent goes on with the reply it already had: it must reach the provider again
    post(http, "rg", [user("q"), first, user("u2")])
    assert [m["content"] for m in fake_upstream.bodies()[-1]["messages"]] == ["q", "first", "u2"]
    settled(http, "rg", 4)
    live = http.get("/v1/sessions/rg/messages").json()["data"]
    assert [r["message"]["content"] for r in live] == ["q", "first", "u2", "after"]


# --------------------------------------------------------------------------- SDK round trip


def sid_headers(sid: str) -> dict[str, Any]:
    return {"extra_headers": {"X-Session-Id": sid}}


ECHOES = {
    "model_dump_exclude_none": lambda m: m.model_dump(exclude_none=True),
    "model_dump": lambda m: m.model_dump(),
    "plain_dict": lambda m: {"role": "assistant", "content": m.content},
}


def test_sdk_echo_of_the_reply_takes_the_fast_path(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    for sid, echo in ECHOES.items():
        messages: list[Any] = [{"role": "system", "content": "sys"}, user("q1")]
        for turn in range(3):
            out = client.chat.completions.create(model=MODEL, messages=messages, **sid_headers(sid))
            messages += [echo(out.choices[0].message), user(f"q{turn + 2}")]
        client.chat.completions.create(model=MODEL, messages=messages, **sid_headers(sid))
        view = settled(http, sid, len(messages) + 1)
        assert view["superseded_count"] == 0, sid


def test_sdk_echo_of_tool_calls_takes_the_fast_path(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    calls = [tool_call("grep", {"q": "x"}), tool_call("ls", {"path": "."})]
    fake_upstream.script(reply(None, tool_calls=calls), reply("done"))
    messages: list[Any] = [user("find x")]
    out = client.chat.completions.create(model=MODEL, messages=messages, **sid_headers("tc"))
    msg = out.choices[0].message
    assert msg.tool_calls is not None and len(msg.tool_calls) == 2
    messages.append(msg.model_dump(exclude_none=True))
    messages += [
        {"role": "tool", "tool_call_id": c.id, "content": f"result of {c.function.name}"}
        for c in msg.tool_calls
    ]
    client.chat.completions.create(model=MODEL, messages=messages, **sid_headers("tc"))
    assert settled(http, "tc", 5)["superseded_count"] == 0


def _accumulate(stream: Any) -> dict[str, Any]:
    """Rebuild the assistant message from chunks, the way agent loops do."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text.append(delta.content or "")
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(
                tc.index,
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            slot["id"] = tc.id or slot["id"]
            if tc.function is not None:
                slot["function"]["name"] += tc.function.name or ""
                slot["function"]["arguments"] += tc.function.arguments or ""
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return msg


def test_streamed_reply_echo_takes_the_fast_path(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply("let me look", tool_calls=[tool_call("ls", {"path": "/tmp"})]),
        reply("here it is", chunks=5),
        reply("bye"),
    )
    messages: list[Any] = [user("what is in /tmp?")]
    kwargs = {"model": MODEL, "stream": True, **sid_headers("st")}
    msg = _accumulate(client.chat.completions.create(messages=messages, **kwargs))
    call_id = msg["tool_calls"][0]["id"]
    messages += [msg, {"role": "tool", "tool_call_id": call_id, "content": "a.txt b.txt"}]
    msg = _accumulate(client.chat.completions.create(messages=messages, **kwargs))
    assert msg == {"role": "assistant", "content": "here it is"}
    messages += [msg, user("thanks")]
    client.chat.completions.create(messages=messages, **kwargs).close()
    view = settled(http, "st", 6)
    assert view["superseded_count"] == 0


# --------------------------------------------------------------------------- concurrency

DELAY = 0.6


class Arrivals:
    """A responder that notes when each upstream call arrived, then answers after DELAY."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, request: RecordedRequest) -> Reply:
        self.times.append(time.monotonic())
        return reply("slow answer", first_byte_delay=DELAY)


def _run_parallel(proxy_url: str, sids: list[str]) -> list[float]:
    """Send one chat request per session id at the same moment; return completion times."""
    done: list[float] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(sids))

    def one(i: int, sid: str) -> None:
        try:
            with httpx.Client(headers={"authorization": "Bearer sk-test-client"}, timeout=10) as c:
                start.wait()
                body = {"model": MODEL, "messages": [user(f"request {i}")]}
                resp = c.post(
                    f"{proxy_url}/chat/completions", json=body, headers={"x-session-id": sid}
                )
                assert resp.status_code == 200, resp.text
                done.append(time.monotonic())
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, s)) for i, s in enumerate(sids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not errors, errors
    return sorted(done)


def test_one_session_is_serialised_different_sessions_overlap(
    proxy: Any, fake_upstream: FakeUpstream
) -> None:
    same = Arrivals()
    fake_upstream.script(same, same)
    t0 = time.monotonic()
    done = _run_parallel(proxy.url, ["same", "same"])
    first, second = sorted(same.times)
    # the second upstream call starts only after the first answered
    assert second - first >= DELAY - 0.01
    assert done[1] - t0 >= 2 * DELAY - 0.01

    apart = Arrivals()
    fake_upstream.script(apart, apart)
    _run_parallel(proxy.url, ["left", "right"])
    first, second = sorted(apart.times)
    # the second upstream call starts while the first is still waiting for its answer
    assert second - first < DELAY


def test_replicas_taking_turns_keep_one_history(
    proxy: ProxyServer, settings: Settings, http: httpx.Client
) -> None:
    """Each replica guesses the stored head it last left; when the other replica moved it,
    the guess is wrong, nothing is written by the first statement, and the request appends
    in a second one. Whatever the order, the store holds exactly the conversation."""
    other = ProxyServer(settings.model_copy(update={"watch_config": False})).start()
    auth = {"authorization": "Bearer sk-test-client"}
    history: list[Any] = [user("q0")]
    try:
        for turn, server in enumerate((proxy, proxy, other, other, proxy, other)):
            with httpx.Client(base_url=server.origin, headers=auth, timeout=10) as c:
                answer = post(c, "turns", history)["choices"][0]["message"]
            settled(http, "turns", len(history) + 1)  # the reply is stored after the answer
            history = [*history, answer, user(f"q{turn + 1}")]
    finally:
        other.stop()
    stored = all_messages(http, "turns")
    assert [r["message"]["content"] for r in stored] == [m["content"] for m in history[:-1]]
    assert session_view(http, "turns")["superseded_count"] == 0
