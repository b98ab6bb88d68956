"""Client mistakes through the real proxy: OpenAI-shaped, actionable, and never losing stored
history.

Issue #2 item 8. Client mistakes are 400 (413 for a body over ``Settings.max_body_bytes``) and
never reach the provider; paths that only look like a route are 404 or 405. Every case checks
``GET /v1/sessions/{id}/messages`` before and after: nothing already stored disappears.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy
from tests.integration.api.errors_helpers import (
    SID,
    TURN1,
    TURN2,
    _assert_error_shape,
    _chat,
    _first_turn,
    _http,
    _stored,
)

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
    "no_role": (
        {"model": "gpt-fake", "messages": [{"content": "x"}]},
        "messages[0].role",
        "missing required parameter 'messages[0].role'",
    ),
    "not_an_object": ({"model": "gpt-fake", "messages": ["text"]}, "messages[0]", "an object"),
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
    "stream": ({"model": "gpt-fake", "messages": TURN1, "stream": "yes"}, "stream", "boolean"),
    "stream_number": ({"model": "gpt-fake", "messages": TURN1, "stream": 1}, "stream", "boolean"),
    "stream_options": (
        {"model": "gpt-fake", "messages": TURN1, "stream": True, "stream_options": "x"},
        "stream_options",
        "must be an object",
    ),
    "include_usage": (
        {"model": "gpt-fake", "messages": TURN1, "stream_options": {"include_usage": "no"}},
        "stream_options.include_usage",
        "must be a boolean",
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
    way goes to the router, which answers a 404 as OpenAI does, with a code to tell it
    from a missing session (the code was the status as a string, "404")."""
    for path in (
        "/s/a/b/v1/chat/completions",
        "/s//v1/chat/completions",
        "/x/v1/chat/completions",
        "/v2/v1/chat/completions",
    ):
        resp = http.post(path, json={"model": "gpt-fake", "messages": TURN2})
        err = _assert_error_shape(resp, 404, "unknown_url")
        assert err == {
            "message": f"Invalid URL (POST {path})",
            "type": "invalid_request_error",
            "param": None,
            "code": "unknown_url",
        }
    resp = http.get("/v1/nope")
    assert _assert_error_shape(resp, 404)["message"] == "Invalid URL (GET /v1/nope)"
    # a tool output with no id, a trailing slash, is no route either, as `/v1/models/` is
    # not: it was the not_found of "no stored output for tool call ''"
    resp = http.get("/v1/sessions/s1/tool-outputs/")
    err = _assert_error_shape(resp, 404, "unknown_url")
    assert err["message"] == "Invalid URL (GET /v1/sessions/s1/tool-outputs/)"
    resp = http.get("/v1/chat/completions")  # the route, another method: the router's 405
    err = _assert_error_shape(resp, 405, "method_not_allowed")
    assert resp.headers["allow"] == "POST" and "use POST" in err["message"]
    assert err["type"] == "invalid_request_error" and err["param"] is None
    resp = http.put("/v1/sessions/s1")  # two routes take this path: GET (so HEAD) and DELETE
    err = _assert_error_shape(resp, 405, "method_not_allowed")
    allow = "DELETE, GET, HEAD"  # HeadAsGet answers HEAD wherever GET is taken
    assert resp.headers["allow"] == allow and f"use {allow}" in err["message"]
    resp = http.delete("/healthz")  # a GET-only route
    assert resp.status_code == 405 and resp.headers["allow"] == "GET, HEAD"
    resp = http.post("/ui/static/app.js")  # a mounted app's 405: its routes are not the app's
    err = _assert_error_shape(resp, 405, "method_not_allowed")
    assert resp.headers["allow"] == "GET, HEAD" and err["message"].endswith("use GET, HEAD")
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
        # not a plain number: refused, rather than replaying every event as none would
        (http.get(f"/v1/sessions/{SID}/events", headers={"last-event-id": "abc"}), "Last-Event-ID"),
        (http.get(f"/v1/sessions/{SID}/events", headers={"last-event-id": "-1"}), "Last-Event-ID"),
        (
            http.get(f"/v1/sessions/{SID}/events", headers={"last-event-id": "²".encode()}),
            "Last-Event-ID",
        ),
        # a resume token (``1.5``) is taken; a mangled one is not
        (http.get(f"/v1/sessions/{SID}/events?last_event_id=1.5e3"), "last_event_id"),
        (http.get(f"/v1/sessions/{SID}/events?last_event_id=1.0"), "last_event_id"),
        (
            http.get(f"/v1/sessions/{SID}/events", headers={"last-event-id": "1." * 800}),
            "Last-Event-ID",
        ),
        (http.post(f"/v1/sessions/{SID}/branch", json={"id": 123}), "id"),
        (http.post(f"/v1/sessions/{SID}/branch", json={"id": ""}), None),
    ]:
        err = _assert_error_shape(resp, 400)
        assert param is None or param in str(err["param"]), err
    # an empty one is none: every event is replayed
    with http.stream("GET", f"/v1/sessions/{SID}/events", headers={"last-event-id": ""}) as events:
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
