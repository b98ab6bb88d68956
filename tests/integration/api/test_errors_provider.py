"""Provider failures through the real proxy: OpenAI-shaped, actionable, and never losing stored
history.

Issue #2 item 8. Provider answers pass through with their status, body and ``Retry-After``;
what the provider cannot mean (a redirect, an HTML page) is 502, an unreachable provider is 502
and a silent one 504 (``timeoutSeconds``); once a stream has answered 200 the error travels
in-band. Every case checks ``GET /v1/sessions/{id}/messages`` before and after: nothing already
stored disappears.
"""

from __future__ import annotations

import json
import socketserver
import threading
from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.replies import error, rate_limited, raw, reply
from tests.fakes.upstream import MODELS, FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config
from tests.integration.api.errors_helpers import (
    SID,
    TURN1,
    TURN2,
    _assert_error_shape,
    _chat,
    _closed_port,
    _first_turn,
    _http,
    _stored,
)


def _sse_error(resp: httpx.Response) -> dict:
    """The in-band error frame of a stream that already answered 200, checked to end in DONE."""
    events = [e for e in resp.content.split(b"\n\n") if e.startswith(b"data:")]
    assert events[-1] == b"data: [DONE]"
    err = json.loads(events[-2][len(b"data:") :])["error"]
    assert set(err) - {"retry_after"} == {"message", "type", "param", "code"}
    return err


UPSTREAM_ERRORS = {
    "429_retry_after": rate_limited(7),
    "500": error(500, {"error": {"message": "boom", "type": "server_error", "code": None}}),
    "400": error(400, {"error": {"message": "context too long", "type": "x", "code": "ctx"}}),
    "503_odd_body": error(503, {"detail": "not even OpenAI-shaped"}, {"retry-after": "30"}),
}


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_upstream_error_passes_through(
    stream: bool, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    before = _first_turn(http, fake_upstream)

    for case, scripted in UPSTREAM_ERRORS.items():
        fake_upstream.script(scripted, scripted)
        direct = httpx.post(f"{fake_upstream.url}/chat/completions", json={"messages": []})

        resp = _chat(http, TURN2, stream=stream)

        assert resp.status_code == direct.status_code == scripted.status, case
        assert resp.content == direct.content, case
        assert resp.headers.get("retry-after") == scripted.headers.get("retry-after"), case
        assert resp.headers["x-session-id"] == SID, case
    after = _stored(http)
    assert after[:2] == before
    assert not any(superseded for *_, superseded in after)


NOT_RELAYED = {
    "redirect": (
        error(301, {}, {"location": "https://api.example.test/v1/chat/completions"}),
        "redirect to https://api.example.test/v1/chat/completions",
    ),
    "html_200": (
        raw("<html>a login page</html>", headers={"content-type": "text/html"}),
        "not a JSON chat completion (text/html)",
    ),
    "error_body_breaks_off": (
        raw(
            '{"error": {"mess',
            'age": "x"}}',
            status=500,
            headers={"content-type": "application/json"},
            reset_after=1,
        ),
        "answered 500, then its body broke off",
    ),
}


@pytest.mark.parametrize(
    ("case", "stream"),
    # (a 200 stream is relayed as it comes, whatever its content type)
    [(c, s) for c in NOT_RELAYED for s in (False, True) if not (s and c == "html_200")],
)
def test_what_the_provider_cannot_mean_is_a_502_and_frees_the_session(
    case: str, stream: bool, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    before = _first_turn(http, fake_upstream)
    scripted, needle = NOT_RELAYED[case]
    fake_upstream.script(scripted)

    resp = _chat(http, TURN2, stream=stream)

    err = _assert_error_shape(resp, 502)
    assert needle in err["message"]
    assert resp.headers["x-session-id"] == SID
    fake_upstream.script(reply("second answer"))  # the session lock was released
    assert _chat(http, TURN2, stream=stream).status_code == 200
    assert _stored(http)[:2] == before


def test_a_stream_of_done_alone_is_an_error_frame_and_stores_nothing(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    # The SDKs would read an empty, successful answer the provider never gave.
    before = _first_turn(http, fake_upstream)
    sse = {"content-type": "text/event-stream"}
    fake_upstream.script(raw("data: [DONE]\n\n", headers=sse))
    resp = _chat(http, TURN2, stream=True)
    frames = [line for line in resp.text.split("\n") if line]
    assert resp.status_code == 200 and frames[-1] == "data: [DONE]" and len(frames) == 2
    err = json.loads(frames[0].removeprefix("data: "))["error"]
    assert err["code"] == "upstream_bad_response" and "no chat stream" in err["message"]
    after = _stored(http)
    assert after[:2] == before and not [row for row in after[2:] if row[1] == "assistant"]


def test_upstream_rate_limit_reaches_sdk_with_retry_after(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(rate_limited(7))

    with pytest.raises(openai.RateLimitError) as exc_info:
        client.chat.completions.create(model="gpt-fake", messages=TURN1)

    assert exc_info.value.response.headers["retry-after"] == "7"
    assert exc_info.value.code == "rate_limit_exceeded"


def test_retry_after_an_upstream_error_continues_the_session(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    _first_turn(http, fake_upstream)
    fake_upstream.script(rate_limited(1), reply("second answer"))

    assert _chat(http, TURN2).status_code == 429
    retried = _chat(http, TURN2)

    assert retried.json()["choices"][0]["message"]["content"] == "second answer"
    sent = [(m["role"], m["content"]) for m in fake_upstream.bodies()[-1]["messages"]]
    assert sent == [(m["role"], m["content"]) for m in TURN2]
    live = [(role, m) for _, role, m, superseded in _stored(http) if not superseded]
    assert [m.get("content") for _, m in live[:3]] == ["first question", "first answer", "next"]


def test_stream_error_after_keepalive_is_an_error_frame(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    # Headers already went out (keep-alives), so the status can only travel in-band.
    before = _first_turn(http, fake_upstream)
    fake_upstream.script(error(503, headers={"retry-after": "9"}, first_byte_delay=1.0))

    resp = _chat(http, TURN2, stream=True)

    assert resp.status_code == 200
    assert resp.content.startswith(b": keep-alive\n\n")
    err = _sse_error(resp)
    assert err["code"] == "503" and err["retry_after"] == "9"  # no header can carry it now
    assert "503 (Retry-After: 9)" in err["message"] and "fake upstream error 503" in err["message"]
    assert _stored(http)[:2] == before


def test_upstream_unreachable_is_502(
    start_proxy: StartProxy, http: httpx.Client, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    before = _first_turn(http, fake_upstream)
    port = _closed_port()
    config = write_config(tmp_path / "down.json", f"http://127.0.0.1:{port}/v1")
    with _http(start_proxy(config)) as down:
        responses = [_chat(down, TURN2, stream=stream) for stream in (False, True)]

    for resp in responses:
        err = _assert_error_shape(resp, 502, "upstream_unreachable")
        assert resp.headers["x-session-id"] == SID
        assert f"127.0.0.1:{port}" in err["message"]
        assert "baseUrl" in err["message"]
    after = _stored(http)
    assert after[:2] == before
    assert not any(superseded for *_, superseded in after)


def _timeout_config(tmp_path: Path, upstream_url: str) -> Path:
    provider = {"baseUrl": upstream_url, "timeoutSeconds": 0.5, "connectTimeoutSeconds": 1}
    return write_config(tmp_path / "slow.json", upstream_url, providers={"openai": provider})


def test_upstream_timeout_is_504(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    server = start_proxy(_timeout_config(tmp_path, fake_upstream.url))
    with _http(server) as http:
        before = _first_turn(http, fake_upstream)
        fake_upstream.script(reply("too late", first_byte_delay=1.5))

        resp = _chat(http, TURN2)

        err = _assert_error_shape(resp, 504, "upstream_timeout")
        assert "timeoutSeconds" in err["message"]
        after = _stored(http)
    assert after[:2] == before
    assert not any(superseded for *_, superseded in after)


def test_upstream_timeout_while_streaming_is_an_error_frame(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    # Past the 0.3 s keep-alive the 200 is committed, so the timeout arrives in-band.
    server = start_proxy(_timeout_config(tmp_path, fake_upstream.url))
    with _http(server) as http:
        before = _first_turn(http, fake_upstream)
        late_headers = reply("too late", first_byte_delay=1.5)
        late_token = reply("too late", first_token_delay=1.5)
        fake_upstream.script(late_headers, late_token)

        responses = [_chat(http, TURN2, stream=True) for _ in (late_headers, late_token)]

        for resp in responses:
            assert resp.status_code == 200
            assert "Timeout" in _sse_error(resp)["message"]  # the read timed out
        assert "timeoutSeconds" in _sse_error(responses[0])["message"]
        # the code of the 504 a request not streamed gets, before the stream and mid-way
        assert [_sse_error(r)["code"] for r in responses] == ["upstream_timeout"] * 2
        assert _stored(http)[:2] == before


def test_models_and_embeddings_pass_through_and_check_a_path_session_id(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    listed = http.get("/s/run-7/v1/models")
    embedded = http.post("/s/run-7/v1/embeddings", json={"model": "e", "input": ["a", "b"]})
    direct = httpx.post(f"{fake_upstream.url}/embeddings", json={"model": "e", "input": ["a", "b"]})

    assert listed.status_code == 200 and listed.json()["object"] == "list"
    assert embedded.content == direct.content
    assert listed.headers["x-session-id"] == embedded.headers["x-session-id"] == "run-7"
    fake_upstream.script(
        error(308, {}, {"location": "https://api.example.test/v1/models"}), endpoint=MODELS
    )
    moved = http.get("/v1/models")  # a passthrough never relays a redirect either
    assert (
        "redirect to https://api.example.test/v1/models"
        in _assert_error_shape(moved, 502)["message"]
    )
    upstream_seen = len(fake_upstream.requests)
    for resp in (
        http.get("/s/bad%20id!/v1/models"),
        http.post("/s/bad%20id!/v1/embeddings", json={"model": "e", "input": "a"}),
    ):
        _assert_error_shape(resp, 400, "invalid_session_id")
    assert len(fake_upstream.requests) == upstream_seen


_EURO_UTF8 = "\xe2\x82\xac"  # the fake sends a str header as latin-1: these are the bytes of €
_COMPLETION = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "fine"},
                "finish_reason": "stop",
            }
        ],
    }
)
_CHUNK = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-fake",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}
        ],
    }
)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_provider_header_that_is_not_latin_1_is_relayed_as_its_bytes(
    http: httpx.Client, fake_upstream: FakeUpstream, stream: bool
) -> None:
    # Building the response raised on it (Starlette encodes headers as latin-1), and the step
    # was never freed: the session's next request waited for ever.
    answer = (
        raw(
            f"data: {_CHUNK}\n\n",
            "data: [DONE]\n\n",
            headers={"content-type": "text/event-stream", "x-request-id": _EURO_UTF8},
        )
        if stream
        else raw(
            _COMPLETION, headers={"content-type": "application/json", "x-request-id": _EURO_UTF8}
        )
    )
    fake_upstream.script(answer, reply("next"))
    body = {"model": "gpt-fake", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    first = http.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "hdr"})
    assert first.status_code == 200
    # the provider's id, beside the proxy's own X-Request-Id (proxy.middleware.AccessLog)
    assert (b"x-upstream-request-id", "€".encode()) in first.headers.raw
    assert "fine" in first.text
    body = {**body, "stream": False}
    second = http.post(
        "/v1/chat/completions", json=body, headers={"X-Session-Id": "hdr"}, timeout=5
    )
    assert second.status_code == 200 and second.json()["choices"][0]["message"]["content"] == "next"


class _Odd(socketserver.StreamRequestHandler):
    """Answers every request 999, which no ASGI server (the fake's uvicorn) would send."""

    def handle(self) -> None:
        head = self.rfile.readline()
        length = 0
        while (line := self.rfile.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        self.rfile.read(length)
        if head:
            self.wfile.write(
                b"HTTP/1.1 999 Odd\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
            )


def test_a_passthrough_answered_past_599_is_a_502(start_proxy: StartProxy, tmp_path: Path) -> None:
    # Relayed, the ASGI server could not send it: the client would lose its connection.
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Odd) as odd:
        threading.Thread(target=odd.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{odd.server_address[1]}/v1"
        with _http(start_proxy(write_config(tmp_path / "odd.json", url))) as client:
            listed = client.get("/v1/models")
            embedded = client.post("/v1/embeddings", json={"model": "e", "input": "a"})
        odd.shutdown()
    for resp in (listed, embedded):
        assert "answered 999" in _assert_error_shape(resp, 502)["message"]
