"""The headers on the wire of every event stream the real proxy answers, and not on JSON.

A chat stream (relayed or the proxy's own ``/compact`` answer) and the session events carry
``Cache-Control: no-store, no-transform`` and ``X-Accel-Buffering: no``: no cache keeps them,
no intermediary compresses them (a compressor holds events back to fill its blocks), and
nginx in front passes each event on as it comes. A JSON answer carries neither.
"""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream

TURN = [{"role": "user", "content": "go"}]


def _streamed(resp: httpx.Response) -> None:
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers.get_list("cache-control") == ["no-store, no-transform"]
    assert resp.headers.get_list("x-accel-buffering") == ["no"]


@pytest.mark.parametrize("content", ["go", "/compact"], ids=["relayed", "compact-command"])
def test_a_chat_stream_is_neither_cached_nor_buffered(
    http: httpx.Client, fake_upstream: FakeUpstream, content: str
) -> None:
    fake_upstream.script(reply("hi"))
    resp = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": f"headers-{content.strip('/')}"},
        json={
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": content}],
            "stream": True,
        },
    )
    _streamed(resp)


def test_the_session_events_stream_carries_the_same(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("hi"))
    sid = "headers-events"
    http.post(
        "/v1/chat/completions", headers={"x-session-id": sid}, json={"model": "m", "messages": TURN}
    )
    with http.stream("GET", f"/v1/sessions/{sid}/events") as resp:
        _streamed(resp)


def test_a_json_answer_carries_neither(http: httpx.Client, fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("hi"))
    resp = http.post("/v1/chat/completions", json={"model": "gpt-fake", "messages": TURN})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/json")
    assert "x-accel-buffering" not in resp.headers and "cache-control" not in resp.headers
