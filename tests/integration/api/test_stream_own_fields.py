"""A streamed reply stores every field of its deltas as the openai SDK's stream helper merges it.

Providers stream fields beside ``content`` that are no text: ``annotations`` (web search),
``audio`` (its ``data`` and ``transcript`` in pieces), OpenRouter's ``reasoning_details``
(entries merged by their ``index``). ``client.chat.completions.stream(...)`` merges them
into the final message, and a client that resends its ``model_dump()`` sends them back; the
stored reply holds them merged alike, so that resend supersedes nothing.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.reconcile_helpers import MODEL, settled, user


def _frame(delta: dict[str, Any], finish: str | None = None) -> str:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n"


def _detail(index: int, **fields: Any) -> dict[str, Any]:
    return {"reasoning_details": [{"index": index, **fields}]}


CITATION = {
    "type": "url_citation",
    "url_citation": {
        "url": "https://example.com/",
        "title": "Ex",
        "start_index": 0,
        "end_index": 5,
    },
}


def _stream() -> tuple[str, ...]:
    text = {"type": "reasoning.text", "format": "anthropic-claude-v1"}
    return (
        _frame({"role": "assistant", "content": "", **_detail(0, **text, text="Look ")}),
        _frame({"content": None, **_detail(0, type="reasoning.text", text="it up.")}),
        _frame(_detail(0, type="reasoning.text", signature="c2ln")),
        _frame(_detail(1, type="reasoning.encrypted", data="ZW5j", id="r1")),
        _frame({"content": "Hello", "audio": {"id": "audio_1", "transcript": "Hello"}}),
        _frame({"content": " there", "audio": {"data": "UklG", "transcript": " there"}}),
        _frame({"audio": {"data": "RiQA", "expires_at": 1_700_000_000}}),
        _frame({"annotations": [CITATION]}),
        _frame({}, "stop"),
        "data: [DONE]\n\n",
    )


def test_the_sdk_helpers_resend_of_a_streamed_reply_supersedes_nothing(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(raw(*_stream()))
    headers = {"X-Session-Id": "own"}
    messages: list[Any] = [user("look it up")]
    with client.chat.completions.stream(
        model=MODEL, messages=messages, extra_headers=headers
    ) as stream:
        final = stream.get_final_completion().choices[0].message.model_dump()
    assert final["audio"]["data"] == "UklGRiQA" and final["annotations"] == [CITATION]
    messages += [final, user("thanks")]
    client.chat.completions.create(model=MODEL, messages=messages, extra_headers=headers)
    assert settled(http, "own", 4)["superseded_count"] == 0
    stored = http.get("/v1/sessions/own/messages").json()["data"][1]["message"]
    assert stored["reasoning_details"][0]["text"] == "Look it up."
    assert stored["audio"] == final["audio"]


def _choices(*deltas: dict[str, Any], finish: str | None = None) -> str:
    choices = [{"index": i, "delta": d, "finish_reason": finish} for i, d in enumerate(deltas)]
    chunk = {"id": "c2", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
    return f"data: {json.dumps({**chunk, 'choices': choices})}\n\n"


def test_choices_interleaved_and_a_field_repeated_on_every_delta_merge_as_the_sdks(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    # a provider that repeats its own fields on every delta (an id, a list of sources):
    # the SDK joins and extends them, and so does the stored reply of choice 0
    seen = {"provider": {"id": "p1"}, "sources": ["s"], "reasoning_details": []}
    words = ["One", " two", " three"]
    fake_upstream.script(
        raw(
            _choices({"role": "assistant", **seen}, {"role": "assistant", **seen}),
            *(_choices({"content": w, **seen}, {"content": w.upper(), **seen}) for w in words),
            _choices({}, {}, finish="stop"),
            "data: [DONE]\n\n",
        )
    )
    headers = {"X-Session-Id": "many"}
    messages: list[Any] = [user("count")]
    with client.chat.completions.stream(
        model=MODEL, messages=messages, n=2, extra_headers=headers
    ) as stream:
        final = stream.get_final_completion().choices[0].message.model_dump()
    assert final["content"] == "One two three" and final["sources"] == ["s"] * 4
    messages += [final, user("thanks")]
    client.chat.completions.create(model=MODEL, messages=messages, extra_headers=headers)
    assert settled(http, "many", 4)["superseded_count"] == 0


def test_a_stream_with_own_fields_is_relayed_byte_for_byte(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    frames = _stream()
    fake_upstream.script(raw(*frames))
    body = {"model": MODEL, "messages": [user("look it up")], "stream": True}
    answer = http.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "bytes"})
    assert answer.text == "".join(frames)
