"""What the session tests share (test_sessions.py, test_session_ids_and_tenants.py and the
tests that reuse their config): a config with a small ``maxChars``, chat posts on a named
session, the session's stored view once it settles, and the OpenAI-shaped 404."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config

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


def live_messages(http: httpx.Client, sid: str) -> list[Any]:
    """The session's live messages (none for a session never made), as the prompt has them."""
    rows = http.get(f"/v1/sessions/{sid}/messages").json().get("data") or []
    return [r["message"] for r in rows if not r["superseded"]]


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
