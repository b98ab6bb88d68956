"""Sessions and tenants (DESIGN §4) and the session API (DESIGN §3), over real HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from proxy import cli
from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.conftest import column, run_sync

MODEL = "gpt-4o-mini"  # longest prefix "gpt-4o" in the config below
LIMIT = 50_000
MAX_CHARS = 200
BIG_OUTPUT = "".join(f"line {i:04d} of the listing\n" for i in range(200))


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        models={"gpt-4o": {"contextLimit": LIMIT}, "default": {"contextLimit": 128_000}},
        context={"toolOutput": {"maxChars": MAX_CHARS}},
    )


@pytest.fixture
def other(proxy: ProxyServer) -> Iterator[httpx.Client]:
    """A client with a different bearer token: another pass-through tenant."""
    headers = {"authorization": "Bearer sk-someone-else"}
    with httpx.Client(base_url=proxy.origin, headers=headers, timeout=10) as c:
        yield c


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def chat(
    http: httpx.Client,
    messages: list[dict[str, Any]],
    *,
    sid: str | None = None,
    url: str = "/v1/chat/completions",
    headers: dict[str, str] | None = None,
    **body: Any,
) -> httpx.Response:
    hdrs = dict(headers or {})
    if sid is not None:
        hdrs["x-session-id"] = sid
    resp = http.post(url, json={"model": MODEL, "messages": messages, **body}, headers=hdrs)
    assert resp.status_code == 200, resp.text
    return resp


def settled(
    http: httpx.Client, sid: str, count: int, until: Callable[[dict[str, Any]], bool] | None = None
) -> dict[str, Any]:
    """The session once ``count`` messages are stored (and ``until`` holds): a non-streamed
    reply, its usage and events are stored just after the response is sent."""
    deadline = time.monotonic() + 5
    while True:
        resp = http.get(f"/v1/sessions/{sid}")
        view = resp.json() if resp.status_code == 200 else {}
        if view.get("message_count") == count and (until is None or until(view)):
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"session {sid} never reached {count} messages: {resp.text}")
        time.sleep(0.02)


def messages_of(http: httpx.Client, sid: str, **params: Any) -> list[dict[str, Any]]:
    resp = http.get(f"/v1/sessions/{sid}/messages", params=params)
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def assert_openai_404(resp: httpx.Response) -> None:
    assert resp.status_code == 404, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]


def tool_history() -> list[dict[str, Any]]:
    call = {"id": "call_ls", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
    return [
        user("list the files"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_ls", "content": BIG_OUTPUT},
    ]


def table_counts(dsn: str, sid: str) -> dict[str, int]:
    async def go() -> dict[str, int]:
        conn = await asyncpg.connect(dsn)
        try:
            out = {}
            for table in ("messages", "tool_raw_outputs", "summaries", "events"):
                sql = f"SELECT count(*) FROM {table} WHERE session_id = $1"
                out[table] = await conn.fetchval(sql, sid)
            out["sessions"] = await conn.fetchval("SELECT count(*) FROM sessions WHERE id=$1", sid)
            return out
        finally:
            await conn.close()

    return run_sync(go())


# --------------------------------------------------------------------------- session ids


def test_derived_id_is_stable_across_turns(http: httpx.Client) -> None:
    history = [{"role": "system", "content": "be brief"}, user("first question")]
    first = chat(http, history)
    sid = first.headers["x-session-id"]
    assert sid.startswith("auto-")
    settled(http, sid, 3)
    answer = first.json()["choices"][0]["message"]
    second = chat(http, [*history, answer, user("follow-up")])
    assert second.headers["x-session-id"] == sid
    assert settled(http, sid, 5)["superseded_count"] == 0
    # a conversation with another opening lands elsewhere
    third = chat(http, [{"role": "system", "content": "be brief"}, user("other question")])
    assert third.headers["x-session-id"] not in (sid, "")
    assert third.headers["x-session-id"].startswith("auto-")


def test_first_match_wins_path_then_header_then_metadata(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    meta = {"metadata": {"session_id": "m-id", "keep": "me"}}
    resp = chat(http, [user("a")], url="/s/p-id/v1/chat/completions", sid="h-id", **meta)
    assert resp.headers["x-session-id"] == "p-id"
    resp = chat(http, [user("b")], sid="h-id", **meta)
    assert resp.headers["x-session-id"] == "h-id"
    resp = chat(http, [user("c")], **meta)
    assert resp.headers["x-session-id"] == "m-id"
    for sid, text in (("p-id", "a"), ("h-id", "b"), ("m-id", "c")):
        settled(http, sid, 2)
        assert messages_of(http, sid)[0]["message"]["content"] == text
    # metadata.session_id is the proxy's; the rest of metadata goes upstream untouched
    assert [b["metadata"] for b in fake_upstream.bodies()] == [{"keep": "me"}] * 3


def test_streamed_response_carries_session_id(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": [user("hi")], "stream": True}
    with http.stream(
        "POST", "/v1/chat/completions", json=body, headers={"x-session-id": "streamed"}
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["x-session-id"] == "streamed"
        text = resp.read().decode()
    assert text.rstrip().endswith("data: [DONE]")
    assert http.get("/v1/sessions/streamed").json()["message_count"] == 2


def test_invalid_session_id_is_400(http: httpx.Client, fake_upstream: FakeUpstream) -> None:
    body = {"model": MODEL, "messages": [user("hi")]}
    for bad in ("has space", "x" * 129, "semi;colon"):
        resp = http.post("/v1/chat/completions", json=body, headers={"x-session-id": bad})
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "invalid_session_id"
    meta = {**body, "metadata": {"session_id": "bad id"}}
    assert http.post("/v1/chat/completions", json=meta).status_code == 400
    assert http.post("/s/bad%20id/v1/chat/completions", json=body).status_code == 400
    assert fake_upstream.bodies() == []


# --------------------------------------------------------------------------- tenants


def test_same_session_id_is_separate_per_tenant(http: httpx.Client, other: httpx.Client) -> None:
    chat(http, [user("mine")], sid="shared")
    chat(other, [user("theirs"), {"role": "assistant", "content": "x"}, user("more")], sid="shared")
    assert settled(http, "shared", 2)["superseded_count"] == 0
    assert settled(other, "shared", 4)["superseded_count"] == 0
    assert messages_of(http, "shared")[0]["message"]["content"] == "mine"
    assert messages_of(other, "shared")[0]["message"]["content"] == "theirs"


def test_other_tenant_gets_404_everywhere(
    proxy: ProxyServer, http: httpx.Client, other: httpx.Client
) -> None:
    chat(http, [*tool_history()], sid="private")
    settled(http, "private", 4)
    assert [s["id"] for s in other.get("/v1/sessions").json()["data"]] == []
    base = "/v1/sessions/private"
    for method, path in [
        ("GET", base),
        ("GET", f"{base}/messages"),
        ("GET", f"{base}/events"),
        ("GET", f"{base}/tool-outputs/call_ls"),
        ("POST", f"{base}/branch"),
        ("POST", f"{base}/reset"),
        ("DELETE", base),
    ]:
        assert_openai_404(other.request(method, path))
    # nothing the other tenant tried changed the session
    mine = http.get(base).json()
    assert mine["message_count"] == 4
    assert http.get(f"{base}/tool-outputs/call_ls").status_code == 200
    assert [s["id"] for s in http.get("/v1/sessions").json()["data"]] == ["private"]
    # a request without a bearer token is a tenant of its own, too
    with httpx.Client(base_url=proxy.origin, timeout=10) as anon:
        assert_openai_404(anon.get(base))


# --------------------------------------------------------------------------- session API


def test_list_sessions(http: httpx.Client) -> None:
    for sid in ("one", "two"):
        chat(http, [user(sid)], sid=sid)
        settled(http, sid, 2)
    data = http.get("/v1/sessions").json()["data"]
    assert [s["id"] for s in data] == ["two", "one"]
    assert all(s["message_count"] == 2 and s["model"] == MODEL for s in data)
    assert [s["id"] for s in http.get("/v1/sessions", params={"limit": 1}).json()["data"]] == [
        "two"
    ]


def test_show_reports_counts_occupancy_limit_and_prompt_tokens(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("answer", usage=(1234, 5)))
    chat(http, [{"role": "system", "content": "sys"}, user("q")], sid="shown")
    shown = settled(http, "shown", 3, until=lambda s: s["last_prompt_tokens"] is not None)
    assert shown["id"] == "shown"
    assert shown["model"] == MODEL
    assert shown["context_limit"] == LIMIT
    assert shown["last_prompt_tokens"] == 1234
    assert shown["occupancy"] == 1234
    assert shown["fraction"] == round(1234 / LIMIT, 4)
    assert shown["superseded_count"] == 0
    assert shown["summary"] is None


def test_messages_show_the_live_history_in_order(http: httpx.Client) -> None:
    resp = chat(http, [user("q1")], sid="msgs")
    answer = resp.json()["choices"][0]["message"]
    chat(http, [user("q1"), answer, user("q2")], sid="msgs")
    settled(http, "msgs", 4)
    rows = messages_of(http, "msgs")
    assert [(r["pos"], r["role"], r["source"]) for r in rows] == [
        (0, "user", "client"),
        (1, "assistant", "upstream"),
        (2, "user", "client"),
        (3, "assistant", "upstream"),
    ]
    assert rows[2]["message"] == user("q2")
    assert [r["pos"] for r in messages_of(http, "msgs", limit=2, offset=1)] == [1, 2]


def test_branch_copies_messages_and_tool_outputs(http: httpx.Client) -> None:
    chat(http, tool_history(), sid="parent")
    settled(http, "parent", 4)
    resp = http.post("/v1/sessions/parent/branch", json={"id": "child"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"id": "child", "object": "session", "parent_id": "parent"}
    strip = [(r["pos"], r["role"], r["message"]) for r in messages_of(http, "parent")]
    assert [(r["pos"], r["role"], r["message"]) for r in messages_of(http, "child")] == strip
    out = http.get("/v1/sessions/child/tool-outputs/call_ls").json()
    assert out["total_chars"] == len(BIG_OUTPUT)
    assert "line 0000 of the listing" in out["page"]
    grep = http.get("/v1/sessions/child/tool-outputs/call_ls", params={"grep": "line 0199"})
    assert "line 0199" in grep.json()["page"]
    assert http.get("/v1/sessions/child").json()["parent_id"] == "parent"
    assert_openai_404(http.get("/v1/sessions/child/tool-outputs/call_missing"))
    # an id that is taken, or invalid, is refused and changes nothing
    taken = http.post("/v1/sessions/parent/branch", json={"id": "child"})
    assert taken.status_code == 400
    assert taken.json()["error"]["param"] == "id"
    assert http.post("/v1/sessions/parent/branch", json={"id": "no spaces"}).status_code == 400
    assert [s["id"] for s in http.get("/v1/sessions").json()["data"]] == ["child", "parent"]


def test_branch_is_independent_of_its_parent(http: httpx.Client) -> None:
    resp = chat(http, tool_history(), sid="p")
    settled(http, "p", 4)
    branch = http.post("/v1/sessions/p/branch").json()["id"]
    assert branch.startswith("p-branch-")
    parent_before = messages_of(http, "p")
    # continuing the branch, even with an edited history, leaves the parent as it was
    answer = resp.json()["choices"][0]["message"]
    chat(http, [*tool_history(), answer, user("only on the branch")], sid=branch)
    settled(http, branch, 6)
    chat(http, [user("rewritten")], sid=branch)
    assert settled(http, branch, 2)["superseded_count"] == 6
    assert messages_of(http, "p") == parent_before
    assert http.get("/v1/sessions/p").json()["superseded_count"] == 0
    # deleting the parent leaves the branch's copies
    assert http.delete("/v1/sessions/p").status_code == 200
    assert http.get(f"/v1/sessions/{branch}/tool-outputs/call_ls").status_code == 200
    assert len(messages_of(http, branch, include_superseded="true")) == 8


def test_reset_forgets_the_history(http: httpx.Client) -> None:
    chat(http, tool_history(), sid="r")
    settled(http, "r", 4)
    resp = http.post("/v1/sessions/r/reset")
    assert resp.status_code == 200
    assert resp.json()["reset"] is True
    shown = http.get("/v1/sessions/r").json()
    assert shown["message_count"] == 0 and shown["last_prompt_tokens"] is None
    assert messages_of(http, "r", include_superseded="true") == []
    assert_openai_404(http.get("/v1/sessions/r/tool-outputs/call_ls"))
    # the next request starts the history again from what the client sends
    chat(http, [user("fresh start")], sid="r")
    assert [r["message"] for r in messages_of(http, "r")][:1] == [user("fresh start")]


def test_delete_cascades_to_everything_the_session_owns(http: httpx.Client, db_dsn: str) -> None:
    for sid in ("gone", "stays"):
        chat(http, tool_history(), sid=sid)
        settled(http, sid, 4)
    before = table_counts(db_dsn, "gone")
    assert before["messages"] == 4 and before["tool_raw_outputs"] == 1 and before["events"] >= 1
    resp = http.delete("/v1/sessions/gone")
    assert resp.status_code == 200
    assert resp.json() == {"id": "gone", "object": "session", "deleted": True}
    assert table_counts(db_dsn, "gone") == dict.fromkeys(
        ("messages", "tool_raw_outputs", "summaries", "events", "sessions"), 0
    )
    stays = table_counts(db_dsn, "stays")
    assert (stays["sessions"], stays["messages"], stays["tool_raw_outputs"]) == (1, 4, 1)
    assert stays["events"] >= 1
    assert_openai_404(http.get("/v1/sessions/gone"))
    assert_openai_404(http.delete("/v1/sessions/gone"))


def test_unknown_session_is_openai_shaped_404(http: httpx.Client) -> None:
    base = "/v1/sessions/nope"
    for method, path in [
        ("GET", base),
        ("GET", f"{base}/messages"),
        ("GET", f"{base}/events"),
        ("GET", f"{base}/tool-outputs/call_1"),
        ("POST", f"{base}/branch"),
        ("POST", f"{base}/reset"),
        ("DELETE", base),
    ]:
        assert_openai_404(http.request(method, path))


@pytest.mark.parametrize("action", ["reset", "delete"])
def test_reset_and_delete_wait_for_the_request_in_flight(
    action: str,
    http: httpx.Client,
    proxy: ProxyServer,
    fake_upstream: FakeUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    chat(http, [user("one")], sid="busy")
    settled(http, "busy", 2)
    fake_upstream.script(reply("slow answer", chunks=6, chunk_delay=0.15))
    history = [user("one"), {"role": "assistant", "content": "ok"}, user("two")]
    ended: list[float] = []

    def stream() -> None:
        with httpx.Client(base_url=proxy.origin, headers=http.headers, timeout=10) as c:
            chat(c, history, sid="busy", stream=True)
        ended.append(time.monotonic())

    worker = threading.Thread(target=stream)
    worker.start()
    fake_upstream.wait_for_requests(2)  # the stream is under way upstream
    assert not ended
    resp = (
        http.post("/v1/sessions/busy/reset")
        if action == "reset"
        else http.delete("/v1/sessions/busy")
    )
    worker.join(10)
    assert resp.status_code == 200 and ended
    assert "could not record the reply" not in caplog.text  # its step was not cut in two
    if action == "reset":  # the step was stored whole, then forgotten whole
        assert http.get("/v1/sessions/busy").json()["message_count"] == 0
        assert messages_of(http, "busy", include_superseded="true") == []
    else:
        assert_openai_404(http.get("/v1/sessions/busy"))


def test_a_tool_call_id_that_comes_back_serves_its_newest_result(
    http: httpx.Client, db_dsn: str
) -> None:
    # An edited tool result resent under the same id, then the id reused on a later turn:
    # the marker in the live message names the id, so the id serves the newest text, and
    # every text it replaced is kept.
    history = tool_history()
    chat(http, history, sid="again")
    settled(http, "again", 4)
    edited = BIG_OUTPUT.replace("listing", "catalogue")
    history[2] = {**history[2], "content": edited}
    chat(http, history, sid="again")
    page = http.get("/v1/sessions/again/tool-outputs/call_ls").json()["page"]
    assert "line 0000 of the catalogue" in page
    reused = BIG_OUTPUT.replace("listing", "index")
    history += [
        {"role": "assistant", "content": "ok"},
        user("again"),
        {"role": "assistant", "content": None, "tool_calls": history[1]["tool_calls"]},
        {"role": "tool", "tool_call_id": "call_ls", "content": reused},
    ]
    chat(http, history, sid="again")
    page = http.get("/v1/sessions/again/tool-outputs/call_ls").json()["page"]
    assert "line 0000 of the index" in page

    versions = (
        "SELECT content FROM tool_raw_output_versions WHERE session_id = 'again'"
        " ORDER BY replaced_at"
    )
    assert column(db_dsn, versions) == [BIG_OUTPUT, edited]
    assert http.post("/v1/sessions/again/reset").status_code == 200
    assert column(db_dsn, versions) == []


def test_concurrent_branches_to_one_new_id_give_one_session_and_400s(
    http: httpx.Client, proxy: ProxyServer
) -> None:
    # Each checked that the id was free, then all inserted it: the losers got a 500.
    for n in range(4):
        chat(http, [user(f"source {n}")], sid=f"src-{n}")
    statuses: list[int] = []

    def branch(n: int) -> None:
        with httpx.Client(base_url=proxy.origin, headers=http.headers, timeout=10) as c:
            statuses.append(
                c.post(f"/v1/sessions/src-{n}/branch", json={"id": "dup-target"}).status_code
            )

    for _ in range(3):  # a race: a few rounds make a loser at least once
        http.delete("/v1/sessions/dup-target")
        workers = [threading.Thread(target=branch, args=(n,)) for n in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(10)
    assert len(statuses) == 12
    assert sorted(set(statuses)) == [200, 400] and statuses.count(200) == 3


@pytest.mark.parametrize(
    "path", ["/v1/sessions/", "/v1/chat/completions/", "/v1/sessions/src-0/events/"]
)
def test_a_trailing_slash_is_a_404_not_a_redirect(http: httpx.Client, path: str) -> None:
    resp = http.request(
        "POST" if "chat" in path else "GET", path, json={}, headers={"host": "evil.example"}
    )
    assert resp.status_code == 404 and "location" not in resp.headers
    assert_openai_404(resp)


def test_the_sessions_command_lists_and_shows_any_valid_id(
    http: httpx.Client, proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # ".." is a valid id; unescaped, "show .." asked GET /v1
    for sid in ("..", "a.b:c"):
        chat(http, [user("hi")], sid=sid)
    key = ["--url", proxy.origin, "--api-key", "sk-test-client", "--json"]
    assert cli.main(["sessions", *key, "ls"]) == 0
    listed = {s["id"] for s in json.loads(capsys.readouterr().out)["data"]}
    assert {"..", "a.b:c"} <= listed
    for sid in ("..", "a.b:c"):
        assert cli.main(["sessions", *key, "show", sid]) == 0
        assert json.loads(capsys.readouterr().out)["id"] == sid
    assert cli.main(["sessions", *key, "show", "nope"]) == 1


def test_the_sessions_command_says_when_the_url_is_no_cascade_proxy(
    fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_upstream.script(
        raw("<html>bad gateway</html>", status=502, headers={"content-type": "text/html"}),
        endpoint="/v1/sessions",
    )
    origin = fake_upstream.url.removesuffix("/v1")
    assert cli.main(["sessions", "--url", origin, "ls"]) == 2  # was a JSONDecodeError
    assert "answered 502 with no JSON: <html>bad gateway</html>" in capsys.readouterr().err
