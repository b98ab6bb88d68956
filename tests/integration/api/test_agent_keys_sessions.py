"""Regression: a proxy key limited to some agents (``agents``) was refused a chat routed to
another agent and a compaction of another agent's session, yet it listed every session of
its tenant and could read, stream, page, branch, reset and delete any of them, and chat on
one (which moved it to the key's agent and sent its stored history to that agent's
provider). A limited key now reaches only the sessions of its agents: the list shows those,
and every per-session route answers 403 ``agent_not_allowed`` on another agent's session."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy
from tests.integration.api.limited_keys import FULL, LIMITED, client, start_with_limited_key
from tests.integration.api.sessions_helpers import MAX_CHARS, settled, tool_history


@pytest.fixture
def server(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> ProxyServer:
    return start_with_limited_key(
        start_proxy,
        fake_upstream,
        tmp_path,
        monkeypatch,
        context={"toolOutput": {"maxChars": MAX_CHARS}},
    )


@pytest.fixture
def origin(server: ProxyServer) -> str:
    return server.origin


@pytest.fixture
def full(origin: str) -> Iterator[httpx.Client]:
    """The unlimited key's client, with two sessions made: ``reviewer-run`` first, then
    ``coder-run`` (the later, listed first), each with a spilled tool output ``call_ls``."""
    with client(origin, FULL) as http:
        for agent in ("reviewer", "coder"):
            body = {"model": agent, "messages": tool_history()}
            sent = http.post(
                "/v1/chat/completions", json=body, headers={"x-session-id": f"{agent}-run"}
            )
            assert sent.status_code == 200, sent.text
            settled(http, f"{agent}-run", 4)
        yield http


@pytest.fixture
def limited(origin: str, full: httpx.Client) -> Iterator[httpx.Client]:
    with client(origin, LIMITED) as http:
        yield http


def _assert_agent_not_allowed(resp: httpx.Response) -> None:
    assert resp.status_code == 403, resp.text
    error = resp.json()["error"]
    assert (error["type"], error["code"]) == ("request_forbidden", "agent_not_allowed")
    assert "coder-run" in error["message"] and LIMITED not in error["message"]


def test_a_limited_key_lists_only_its_agents_sessions(
    limited: httpx.Client, full: httpx.Client
) -> None:
    assert [s["id"] for s in full.get("/v1/sessions").json()["data"]] == [
        "coder-run",
        "reviewer-run",
    ]
    assert [s["id"] for s in limited.get("/v1/sessions").json()["data"]] == ["reviewer-run"]
    # the filter comes before the page: the first page of one is the key's session
    first = limited.get("/v1/sessions", params={"limit": 1}).json()["data"]
    assert [s["id"] for s in first] == ["reviewer-run"]
    assert limited.get("/v1/sessions", params={"offset": 1}).json()["data"] == []
    # so does ?q=: another agent's session is no match, not a 403
    assert limited.get("/v1/sessions", params={"q": "coder"}).json()["data"] == []
    found = full.get("/v1/sessions", params={"q": "CODER"}).json()["data"]
    assert [s["id"] for s in found] == ["coder-run"]


ROUTES = [
    ("GET", "/v1/sessions/{}", 200),
    ("GET", "/v1/sessions/{}/messages", 200),
    ("GET", "/v1/sessions/{}/tool-outputs/call_ls", 200),
    ("POST", "/v1/sessions/{}/branch", 200),
    ("POST", "/v1/sessions/{}/reset", 200),
    ("DELETE", "/v1/sessions/{}", 200),
]


@pytest.mark.parametrize(("method", "path", "ok"), ROUTES, ids=[r[1] + " " + r[0] for r in ROUTES])
def test_a_limited_key_reaches_only_its_agents_sessions(
    limited: httpx.Client, full: httpx.Client, method: str, path: str, ok: int
) -> None:
    refused = limited.request(method, path.format("coder-run"))
    _assert_agent_not_allowed(refused)
    assert limited.request(method, path.format("reviewer-run")).status_code == ok
    # nothing happened to the other agent's session
    view = full.get("/v1/sessions/coder-run").json()
    assert (view["agent"], view["message_count"]) == ("coder", 4)
    listed = full.get("/v1/sessions").json()["data"]
    assert not any(s["parent_id"] == "coder-run" for s in listed)  # no branch of it


def test_every_route_naming_a_session_refuses_another_agents(
    server: ProxyServer, limited: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """Read from the app's routes, so a session route added later is covered; the models
    and embeddings under ``/s/{id}/`` are left out: this key does not list ``default``,
    their agent, so they are its 403 whatever the session (test_agent_keys_models has a
    key that lists it)."""
    checked = set()
    sent = len(fake_upstream.requests)
    for context in iter_route_contexts(server.app.routes):
        if "{session_id}" not in context.path or "/models" in context.path:
            continue
        if context.path.endswith("/embeddings"):
            continue
        path = context.path.replace("{session_id}", "coder-run")
        path = path.replace("{deployment}", "reviewer")  # Azure's chat: the model, allowed
        path = re.sub(r"\{[^}]+\}", "x1", path)
        for method in sorted(set(context.methods or ()) - {"HEAD"}):
            body = {"model": "reviewer", "messages": [{"role": "user", "content": "hi"}]}
            _assert_agent_not_allowed(limited.request(method, path, json=body))
            checked.add((method, context.path))
    assert len(checked) == 10, checked  # the session API's 8, and the session's two chats
    assert len(fake_upstream.requests) == sent


def test_a_limited_key_gets_no_event_stream_of_another_agents_session(
    limited: httpx.Client,
) -> None:
    with limited.stream("GET", "/v1/sessions/coder-run/events") as refused:
        refused.read()
        _assert_agent_not_allowed(refused)
    with limited.stream("GET", "/v1/sessions/reviewer-run/events") as served:
        assert served.status_code == 200
        assert served.headers["content-type"].startswith("text/event-stream")


@pytest.mark.parametrize("named_by", ["path", "header", "metadata"])
def test_a_limited_key_cannot_chat_on_another_agents_session(
    limited: httpx.Client, full: httpx.Client, fake_upstream: FakeUpstream, named_by: str
) -> None:
    """Chat on a named session moves it to the routed agent: a limited key doing so would
    take the session over and have its summary and window sent to its own agent's provider."""
    sent = len(fake_upstream.requests)
    messages = [*tool_history(), {"role": "user", "content": "and now?"}]

    def chat(sid: str) -> httpx.Response:
        body: dict[str, Any] = {"model": "reviewer", "messages": messages}
        if named_by == "path":
            return limited.post(f"/s/{sid}/v1/chat/completions", json=body)
        if named_by == "header":
            return limited.post("/v1/chat/completions", json=body, headers={"x-session-id": sid})
        return limited.post("/v1/chat/completions", json=body | {"metadata": {"session_id": sid}})

    _assert_agent_not_allowed(chat("coder-run"))
    assert len(fake_upstream.requests) == sent
    view = full.get("/v1/sessions/coder-run").json()
    assert (view["agent"], view["message_count"]) == ("coder", 4)
    assert chat("reviewer-run").status_code == 200
    assert chat("a-new-run").status_code == 200  # a new session is the routed agent's
    assert full.get("/v1/sessions/a-new-run").json()["agent"] == "reviewer"
