"""Requests and checks the error tests share (test_errors_input.py, test_errors_provider.py,
and the reliability suite): a chat post on one session, the session's stored rows before and
after, the OpenAI error shape, and a port nothing listens on."""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer

CLIENT_KEY = "sk-test-client"
SID = "err-session"
TURN1 = [{"role": "user", "content": "first question"}]
TURN2 = [
    *TURN1,
    {"role": "assistant", "content": "first answer"},
    {"role": "user", "content": "next"},
]


def _http(server: ProxyServer) -> httpx.Client:
    return httpx.Client(
        base_url=server.origin, headers={"authorization": f"Bearer {CLIENT_KEY}"}, timeout=10
    )


def _chat(
    http: httpx.Client, messages: list[dict[str, Any]], *, stream: bool = False, **extra: Any
) -> httpx.Response:
    body = {"model": "gpt-fake", "messages": messages, "stream": stream, **extra}
    return http.post("/v1/chat/completions", json=body, headers={"x-session-id": SID})


def _stored(http: httpx.Client) -> list[tuple[int, str, Any, bool]]:
    resp = http.get(f"/v1/sessions/{SID}/messages", params={"include_superseded": "true"})
    assert resp.status_code == 200, resp.text
    return [(r["pos"], r["role"], r["message"], r["superseded"]) for r in resp.json()["data"]]


def _first_turn(http: httpx.Client, fake: FakeUpstream) -> list[tuple[int, str, Any, bool]]:
    """Store one exchange (user + assistant) and return what the session API shows."""
    fake.script(reply("first answer"))
    assert _chat(http, TURN1).status_code == 200
    for _ in range(100):  # the reply is stored right after the response is sent
        rows = _stored(http)
        if len(rows) == 2:
            return rows
        time.sleep(0.02)
    raise AssertionError(f"first turn not stored: {rows}")


def _assert_error_shape(resp: httpx.Response, status: int, code: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and len(err["message"]) > 15
    if code is not None:
        assert err["code"] == code
    return err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
