"""An answer whose own field nests deep (as deep as the JSON reader takes) reaches the client
whole: making it storable walks it without recursion, so no RecursionError answers 500 or
breaks the stream off. (A message nested past what the hash chain's JSON writer takes is then
not recorded, as any such message is: the turn logs it and ends.)"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.reconcile_helpers import MODEL, user

DEPTH = 1000  # within orjson's 1024 levels, past Python's recursion limit


def _deep(obj: Any) -> str:
    """``obj`` as JSON, its ``"DEEP"`` a list nested ``DEPTH`` levels."""
    return json.dumps(obj, separators=(",", ":")).replace('"DEEP"', "[" * DEPTH + "]" * DEPTH)


def _head(kind: str) -> dict[str, Any]:
    return {"id": "c1", "object": kind, "created": 0, "model": MODEL}


def test_a_deep_field_of_an_answer_not_streamed_is_relayed(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    message = {"role": "assistant", "content": "hi", "deep": "DEEP"}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = _deep({**_head("chat.completion"), "choices": [choice]})
    fake_upstream.script(raw(body, headers={"content-type": "application/json"}))
    asked = {"model": MODEL, "messages": [user("hi")]}
    answer = http.post("/v1/chat/completions", json=asked, headers={"X-Session-Id": "deep"})
    assert answer.status_code == 200
    assert answer.content == body.encode()


def _frame(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return f"data: {_deep({**_head('chat.completion.chunk'), 'choices': [choice]})}\n\n"


def test_a_deep_field_of_a_streamed_tool_call_ends_the_stream_whole(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fn = {"name": "f", "arguments": "{}"}
    call = {"index": 0, "id": "call_1", "type": "function", "function": fn, "deep": "DEEP"}
    fake_upstream.script(
        raw(
            _frame({"role": "assistant", "content": None}),
            _frame({"tool_calls": [call]}),
            _frame({}, "tool_calls"),
            "data: [DONE]\n\n",
        )
    )
    asked = {"model": MODEL, "messages": [user("hi")], "stream": True}
    answer = http.post("/v1/chat/completions", json=asked, headers={"X-Session-Id": "deeps"})
    assert answer.status_code == 200
    assert answer.text.endswith("data: [DONE]\n\n")


def test_a_body_nested_past_the_recursion_limit_for_a_stream_ends_it_whole(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """A provider that ignored ``stream`` and sent one JSON body nested 10,000 levels: the
    relay's look at it for an error object is no RecursionError breaking the stream off: the
    client gets the error frame any answer that is no chat stream gets."""
    depth = 10_000
    body = '{"error": ' + "[" * depth + "]" * depth + "}"
    fake_upstream.script(raw(body, headers={"content-type": "application/json"}))
    asked = {"model": MODEL, "messages": [user("hi")], "stream": True}
    answer = http.post("/v1/chat/completions", json=asked, headers={"X-Session-Id": "deepb"})
    assert answer.status_code == 200
    assert '"code": "upstream_bad_response"' in answer.text, answer.text[:300]
    assert answer.text.endswith("data: [DONE]\n\n"), answer.text[-300:]


def test_an_answer_no_json_reader_can_hold_is_a_502_naming_the_provider(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """An answer nested 10,000 levels, or holding an integer past Python's 4300 digits, is
    the provider's garbage: the 502 names it (as every other 502 for a malformed answer
    does), and its hint names both causes beside "cut short, or not UTF-8"."""
    deep = "[" * 10_000 + "]" * 10_000
    for sid, value in [("deep-502", deep), ("long-502", "9" * 5000)]:
        body = _deep({**_head("chat.completion"), "choices": []}).replace("[]", value)
        fake_upstream.script(raw(body, headers={"content-type": "application/json"}))
        asked = {"model": MODEL, "messages": [user("hi")]}
        answer = http.post("/v1/chat/completions", json=asked, headers={"X-Session-Id": sid})
        assert answer.status_code == 502, answer.text[:300]
        message = answer.json()["error"]["message"]
        assert f"the provider 'openai' at {fake_upstream.origin}" in message, message
        assert "nested too deep" in message and "a number too long" in message, message
