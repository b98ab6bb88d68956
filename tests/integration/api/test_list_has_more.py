"""Every list says whether more follow its page (``has_more``, as OpenAI's lists do): the
sessions, a session's messages, the pending memory suggestions and a scope's facts, and a
tool output's page where the next one starts (``next_offset``). A client paging with
``?limit=``/``?offset=`` could not tell a full last page from a cut one: it asked again for
an empty page, or stopped one short."""

from __future__ import annotations

import httpx

from tests.integration.api.memory_suggestions import suggest
from tests.integration.api.sessions_helpers import (
    BIG_OUTPUT,
    chat,
    config_path,  # noqa: F401  (the module's config)
    settled,
    tool_history,
    user,
)


def test_sessions_and_messages_say_whether_more_follow(http: httpx.Client) -> None:
    for sid in ("a", "b", "c"):
        chat(http, [user(f"hi {sid}")], sid=sid)
        settled(http, sid, 2)

    def page(path: str, limit: int, offset: int = 0) -> tuple[int, bool]:
        resp = http.get(path, params={"limit": limit, "offset": offset})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        return len(body["data"]), body["has_more"]

    assert page("/v1/sessions", 2) == (2, True)
    assert page("/v1/sessions", 2, 2) == (1, False)
    assert page("/v1/sessions", 3) == (3, False)  # full, and the last
    assert page("/v1/sessions", 1, 5) == (0, False)
    assert page("/v1/sessions/a/messages", 1) == (1, True)
    assert page("/v1/sessions/a/messages", 2) == (2, False)
    assert page("/v1/sessions/a/messages", 1, 1) == (1, False)


def test_suggestions_and_facts_say_whether_more_follow(http: httpx.Client, db_dsn: str) -> None:
    for n in range(3):
        suggest(db_dsn, "s1", f"sug-{n}", [f"fact {n}"])
    resp = http.get("/v1/memory/suggestions", params={"limit": 2})
    assert [s["id"] for s in resp.json()["data"]] == ["sug-0", "sug-1"]
    assert resp.json()["has_more"] is True
    resp = http.get("/v1/memory/suggestions", params={"limit": 3})
    assert (len(resp.json()["data"]), resp.json()["has_more"]) == (3, False)
    # the next page is at ?offset= plus the rows shown, as every list's: the offset was
    # ignored, so a client paging on has_more got the first page again, without end
    resp = http.get("/v1/memory/suggestions", params={"limit": 2, "offset": 2})
    assert [s["id"] for s in resp.json()["data"]] == ["sug-2"]
    assert resp.json()["has_more"] is False
    resp = http.get("/v1/memory/suggestions", params={"limit": 1, "offset": 1})
    assert ([s["id"] for s in resp.json()["data"]], resp.json()["has_more"]) == (["sug-1"], True)
    for text in ("The build uses uv", "Tests run with pytest"):
        assert http.post("/v1/memory", json={"text": text}).status_code == 201
    resp = http.get("/v1/memory", params={"limit": 1})
    assert (len(resp.json()["data"]), resp.json()["has_more"]) == (1, True)
    resp = http.get("/v1/memory", params={"limit": 1, "offset": 1})
    assert (len(resp.json()["data"]), resp.json()["has_more"]) == (1, False)
    assert http.get("/v1/memory").json()["has_more"] is False


def test_a_tool_output_page_names_where_the_next_starts(http: httpx.Client) -> None:
    chat(http, tool_history(), sid="t")
    settled(http, "t", 4)
    path = "/v1/sessions/t/tool-outputs/call_ls"
    first = http.get(path, params={"limit": 50}).json()
    assert (first["has_more"], first["next_offset"]) == (True, 50)
    last = http.get(path, params={"offset": len(BIG_OUTPUT) - 10}).json()
    assert (last["has_more"], last["next_offset"]) == (False, None)
    hits = http.get(path, params={"grep": "line 0001", "limit": 1000}).json()
    assert (hits["has_more"], hits["next_offset"]) == (True, 1000)  # the rest is unsearched
    hits = http.get(path, params={"grep": "line 0199"}).json()
    assert (hits["has_more"], hits["next_offset"]) == (False, None)
