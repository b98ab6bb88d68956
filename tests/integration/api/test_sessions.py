"""The session API (DESIGN §3), over real HTTP: list, show, messages, branch, reset and delete,
their 404s, and the ``sessions`` command that reads them."""

from __future__ import annotations

import json
import threading

import asyncpg
import httpx
import pytest

from proxy import cli
from proxy.cli_api import EXIT_NOT_FOUND, EXIT_UNREACHABLE
from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer, raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.sessions_helpers import (
    BIG_OUTPUT,
    LIMIT,
    MODEL,
    assert_openai_404,
    chat,
    config_path,  # noqa: F401  (the module's config: a small maxChars)
    messages_of,
    settled,
    tool_history,
    user,
)
from tests.integration.conftest import column, run_sync


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
    invalid = http.post("/v1/sessions/parent/branch", json={"id": "no spaces"})
    assert invalid.status_code == 400
    # the field at fault, as a taken id's 400 names it: it named none
    assert (invalid.json()["error"]["code"], invalid.json()["error"]["param"]) == (
        "invalid_session_id",
        "id",
    )
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
    pacer = Pacer()  # the stream stays under way until the operation is seen waiting
    fake_upstream.script(reply("slow answer", chunks=6, pacer=pacer))
    history = [user("one"), {"role": "assistant", "content": "ok"}, user("two")]
    ended: list[bool] = []
    answered: list[httpx.Response] = []

    def stream() -> None:
        with httpx.Client(base_url=proxy.origin, headers=http.headers, timeout=10) as c:
            chat(c, history, sid="busy", stream=True)
        ended.append(True)

    def operate() -> None:
        with httpx.Client(base_url=proxy.origin, headers=http.headers, timeout=10) as c:
            path = "/v1/sessions/busy"
            answered.append(c.post(f"{path}/reset") if action == "reset" else c.delete(path))

    workers = [threading.Thread(target=stream), threading.Thread(target=operate)]
    workers[0].start()
    fake_upstream.wait_for_requests(2)  # the stream is under way upstream
    workers[1].start()
    tenant = tenant_from_bearer(http.headers["authorization"])
    waiting = wait_for(lambda: proxy.queued(tenant, "busy") == 2, timeout=10)
    assert waiting and not answered and not ended  # the operation waits for the stream
    pacer.allow(20)
    for w in workers:
        w.join(10)
    assert not pacer.expired
    assert ended and answered and answered[0].status_code == 200, answered
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
    "path",
    [
        "/v1/sessions/",
        "/v1/chat/completions/",
        "/v1/sessions/src-0/events/",
        # an encoded "/" is one in the path routes match: no session route takes it
        "/v1/sessions/a%2Fb",
        "/v1/sessions/a%2Fb/messages",
        "/s/a%2Fb/v1/chat/completions",
    ],
)
def test_a_trailing_or_encoded_slash_is_a_404_not_a_redirect(http: httpx.Client, path: str) -> None:
    # a redirect would be built from Host; a foreign one is refused before routing (a
    # keyless proxy on loopback, test_auth_cross_site.py), so name this machine otherwise
    resp = http.request(
        "POST" if "chat" in path else "GET", path, json={}, headers={"host": "localhost:9"}
    )
    assert resp.status_code == 404 and "location" not in resp.headers
    assert_openai_404(resp)
    assert resp.json()["error"]["code"] == "unknown_url"


def test_the_sessions_command_lists_and_shows_any_valid_id(
    http: httpx.Client, proxy: ProxyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    for sid in ("...", "a.b:c"):
        chat(http, [user("hi")], sid=sid)
    key = ["--url", proxy.origin, "--api-key", "sk-test-client", "--json"]
    assert cli.main(["sessions", *key, "ls"]) == 0
    listed = {s["id"] for s in json.loads(capsys.readouterr().out)["data"]}
    assert {"...", "a.b:c"} <= listed
    for sid in ("...", "a.b:c"):
        assert cli.main(["sessions", *key, "show", sid]) == 0
        assert json.loads(capsys.readouterr().out)["id"] == sid
    assert cli.main(["sessions", *key, "show", "nope"]) == EXIT_NOT_FOUND
    capsys.readouterr()
    # ".." is no id; unescaped, "show .." asked GET /v1 (a 404 of no session route)
    assert cli.main(["sessions", *key, "show", ".."]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "invalid_session_id"


def test_the_sessions_command_says_when_the_url_is_no_cascade_proxy(
    fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_upstream.script(
        raw("<html>bad gateway</html>", status=502, headers={"content-type": "text/html"}),
        endpoint="/v1/sessions",
    )
    origin = fake_upstream.url.removesuffix("/v1")
    # not Cascade's API: no proxy answered (this once raised a JSONDecodeError)
    assert cli.main(["sessions", "--url", origin, "ls"]) == EXIT_UNREACHABLE
    assert "answered 502 with no JSON: <html>bad gateway</html>" in capsys.readouterr().err
