"""Errors through the real proxy: OpenAI-shaped, actionable, and never losing stored history.

Issue #2 item 8. Client mistakes are 400 (413 for a body over ``Settings.max_body_bytes``);
provider answers pass through with their status, body and ``Retry-After``; an unreachable
provider is 502 and a silent one 504 (``timeoutSeconds``). Every case checks
``GET /v1/sessions/{id}/messages`` before and after: nothing already stored disappears.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import error, rate_limited, raw, reply
from tests.fakes.upstream import MODELS, FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, write_config

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


def _sse_error(resp: httpx.Response) -> dict:
    """The in-band error frame of a stream that already answered 200, checked to end in DONE."""
    events = [e for e in resp.content.split(b"\n\n") if e.startswith(b"data:")]
    assert events[-1] == b"data: [DONE]"
    err = json.loads(events[-2][len(b"data:") :])["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- client errors


MALFORMED = {
    "truncated": (b'{"model": "gpt-fake", "messages": [', "not valid JSON"),
    "not_utf8": (b"\xff\xfe not utf-8", "not valid JSON"),
    "not_an_object": (b'["a", "list"]', "JSON object"),
}


def test_malformed_body_is_400(http: httpx.Client, fake_upstream: FakeUpstream) -> None:
    before = _first_turn(http, fake_upstream)

    for case, (content, needle) in MALFORMED.items():
        resp = http.post(
            "/v1/chat/completions",
            content=content,
            headers={"content-type": "application/json", "x-session-id": SID},
        )

        err = _assert_error_shape(resp, 400)
        assert err["type"] == "invalid_request_error", case
        assert needle in err["message"], case
    assert _stored(http) == before
    assert len(fake_upstream.requests) == 1  # nothing went upstream


BAD_MESSAGES = {
    "missing": ({"model": "gpt-fake"}, "messages", "missing required parameter 'messages'"),
    "empty": ({"model": "gpt-fake", "messages": []}, "messages", "non-empty array"),
    "not_a_list": ({"model": "gpt-fake", "messages": "hi"}, "messages", "non-empty array"),
    "no_role": ({"model": "gpt-fake", "messages": [{"content": "x"}]}, "messages[0]", "'role'"),
    "not_an_object": ({"model": "gpt-fake", "messages": ["text"]}, "messages[0]", "'role'"),
    "tool_call_id": (
        {"model": "gpt-fake", "messages": [{"role": "tool", "tool_call_id": 5, "content": "x"}]},
        "messages[0].tool_call_id",
        "must be a string",
    ),
    "tool_call_id_falsy": (
        {"model": "gpt-fake", "messages": [{"role": "tool", "tool_call_id": 0, "content": "x"}]},
        "messages[0].tool_call_id",
        "must be a string",
    ),
    "model": ({"model": ["a"], "messages": TURN1}, "model", "must be a string"),
    "stream_options": (
        {"model": "gpt-fake", "messages": TURN1, "stream": True, "stream_options": "x"},
        "stream_options",
        "must be an object",
    ),
    "tools": ({"model": "gpt-fake", "messages": TURN1, "tools": 5}, "tools", "must be an array"),
}


def test_missing_or_invalid_messages_is_400(
    http: httpx.Client, client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    before = _first_turn(http, fake_upstream)

    for case, (body, param, needle) in BAD_MESSAGES.items():
        resp = http.post("/v1/chat/completions", json=body, headers={"x-session-id": SID})

        err = _assert_error_shape(resp, 400)
        assert err["param"] == param, case
        assert needle in err["message"], case
    with pytest.raises(openai.BadRequestError) as exc_info:  # the SDK's view of it
        client.chat.completions.create(model="gpt-fake", messages=[])
    assert exc_info.value.status_code == 400
    assert exc_info.value.param == "messages"
    assert _stored(http) == before
    assert len(fake_upstream.requests) == 1
    fake_upstream.script(reply("second answer"))  # and the session is not left locked
    assert _chat(http, TURN2, stream=True).status_code == 200


BAD_SESSION_IDS = {
    "header_spaces": ("/v1/chat/completions", {"x-session-id": "has spaces"}, None),
    "header_too_long": ("/v1/chat/completions", {"x-session-id": "x" * 129}, None),
    "metadata_bad_char": ("/v1/chat/completions", {}, {"session_id": "semi;colon"}),
    "metadata_not_string": ("/v1/chat/completions", {}, {"session_id": 42}),
    "path": ("/s/bad%20id!/v1/chat/completions", {}, None),
}


def test_invalid_session_id_is_400(http: httpx.Client, fake_upstream: FakeUpstream) -> None:
    before = _first_turn(http, fake_upstream)

    for case, (path, headers, metadata) in BAD_SESSION_IDS.items():
        body: dict[str, Any] = {"model": "gpt-fake", "messages": TURN2}
        if metadata is not None:
            body["metadata"] = metadata

        resp = http.post(path, json=body, headers=headers)

        err = _assert_error_shape(resp, 400, "invalid_session_id")
        assert "session id" in err["message"].lower(), case
        assert "A-Z" in err["message"], case  # says what is allowed
    assert _stored(http) == before
    assert len(fake_upstream.requests) == 1


def test_paths_that_only_look_like_chat_are_404(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """The chat fast path takes exactly the two chat routes; anything else ending the same
    way goes to the router, which answers an OpenAI-shaped 404."""
    for path in (
        "/s/a/b/v1/chat/completions",
        "/s//v1/chat/completions",
        "/x/v1/chat/completions",
        "/v2/v1/chat/completions",
    ):
        resp = http.post(path, json={"model": "gpt-fake", "messages": TURN2})
        err = _assert_error_shape(resp, 404, "404")
        assert path in err["message"]
    resp = http.get("/v1/chat/completions")  # the route, another method: the router's 405
    err = _assert_error_shape(resp, 405, "405")
    assert resp.headers["allow"] == "POST" and "use POST" in err["message"]
    resp = http.put("/v1/sessions/s1")  # two routes take this path: GET and DELETE
    err = _assert_error_shape(resp, 405, "405")
    assert resp.headers["allow"] == "DELETE, GET" and "use DELETE, GET" in err["message"]
    assert fake_upstream.requests == []


def test_bad_offsets_event_ids_and_branch_ids_are_400(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    _first_turn(http, fake_upstream)
    huge = str(2**64)
    for resp, param in [
        (http.get("/v1/sessions", params={"offset": huge}), "offset"),
        (http.get(f"/v1/sessions/{SID}/messages", params={"offset": huge}), "offset"),
        (http.get(f"/v1/sessions/{SID}/events", headers={"last-event-id": huge}), "Last-Event-ID"),
        (http.post(f"/v1/sessions/{SID}/branch", json={"id": 123}), "id"),
        (http.post(f"/v1/sessions/{SID}/branch", json={"id": ""}), None),
    ]:
        err = _assert_error_shape(resp, 400)
        assert param is None or param in str(err["param"]), err
    # a Last-Event-ID that is not a plain number replays from the start, as none would
    with http.stream(
        "GET", f"/v1/sessions/{SID}/events", headers={"last-event-id": "²".encode()}
    ) as events:
        assert events.status_code == 200
        assert next(events.iter_lines()).startswith(("id:", "event:", ":"))


def test_body_over_limit_is_413(
    start_proxy: StartProxy, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    server = start_proxy(config_path, max_body_bytes=4096)
    with _http(server) as http:
        before = _first_turn(http, fake_upstream)
        big = [*TURN2[:-1], {"role": "user", "content": "x" * 5000}]

        declared = _chat(http, big)
        chunked = http.post(
            "/v1/chat/completions",
            content=iter([json.dumps({"model": "gpt-fake", "messages": big}).encode()]),
            headers={"x-session-id": SID, "content-type": "application/json"},
        )
        small = _chat(http, [*TURN2[:-1], {"role": "user", "content": "x" * 3000}])

        for resp in (declared, chunked):
            err = _assert_error_shape(resp, 413, "payload_too_large")
            assert "4096" in err["message"]
        assert "content-length" not in chunked.request.headers  # really streamed
        assert small.status_code == 200  # under the limit still works
        after = _stored(http)
    assert after[:2] == before
    assert [r[3] for r in after] == [False] * len(after)


def test_an_embeddings_body_over_the_limit_is_413_and_never_sent(
    start_proxy: StartProxy, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    server = start_proxy(config_path, max_body_bytes=4096)
    with _http(server) as http:
        big = http.post("/v1/embeddings", json={"model": "e", "input": "x" * 5000})
        chunked = http.post(
            "/v1/embeddings",
            content=iter([json.dumps({"model": "e", "input": "x" * 5000}).encode()]),
            headers={"content-type": "application/json"},
        )
        small = http.post("/v1/embeddings", json={"model": "e", "input": "x" * 3000})
    for resp in (big, chunked):
        assert "4096" in _assert_error_shape(resp, 413, "payload_too_large")["message"]
    assert small.status_code == 200
    assert [len(r.content) > 3000 for r in fake_upstream.requests] == [True]  # the small one


# --------------------------------------------------------------------------- upstream errors


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
        "could not reach the provider",
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
    assert err["code"] == "503"
    assert "503" in err["message"] and "fake upstream error 503" in err["message"]
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
        assert _sse_error(responses[0])["code"] == "504"
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
