"""Azure's content filter results reach the client as Azure sent them: a whole answer's
``prompt_filter_results`` and each choice's ``content_filter_results``, and a stream's
opening chunk of no choices that carries ``prompt_filter_results``, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.fakes.replies import raw
from tests.fakes.upstream import CHAT, FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

_SAFE = {"hate": {"filtered": False, "severity": "safe"}, "jailbreak": {"filtered": False}}
PROMPT_FILTERS = [{"prompt_index": 0, "content_filter_results": _SAFE}]
_HEAD = {"id": "chatcmpl-az1", "created": 1733500000, "model": "gpt-4o-2024-08-06"}
_CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def _whole() -> bytes:
    answer = {
        **_HEAD,
        "object": "chat.completion",
        "prompt_filter_results": PROMPT_FILTERS,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "logprobs": None,
                "message": {"role": "assistant", "content": "hello"},
                "content_filter_results": _SAFE,
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
    }
    return json.dumps(answer).encode()


OPENING = (
    "data: "
    + json.dumps(
        {
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": PROMPT_FILTERS,
        }
    )
    + "\n\n"
)


def _chunk(delta: dict[str, object], finish: str | None = None, **more: object) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, "content_filter_results": _SAFE}
    data = {**_HEAD, "object": "chat.completion.chunk", "choices": [choice], **more}
    return f"data: {json.dumps(data)}\n\n"


def test_a_whole_answers_filter_results_reach_the_client(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(raw(_whole(), headers={"content-type": "application/json"}), endpoint=CHAT)
    with httpx.Client(base_url=proxy.origin, headers={"authorization": "Bearer sk-t0123"}) as http:
        answer = http.post("/v1/chat/completions", json=_CHAT)
    assert answer.status_code == 200, answer.text
    assert answer.json()["prompt_filter_results"] == PROMPT_FILTERS
    assert answer.json()["choices"][0]["content_filter_results"] == _SAFE


def test_a_streams_prompt_filter_chunk_reaches_the_client_first_and_untouched(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    frames = [
        OPENING,
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "hello"}),
        _chunk({}, "stop"),
        "data: [DONE]\n\n",
    ]
    fake_upstream.script(raw(*frames), endpoint=CHAT)
    with httpx.Client(base_url=proxy.origin, headers={"authorization": "Bearer sk-t0123"}) as http:
        answer = http.post("/v1/chat/completions", json={**_CHAT, "stream": True})
    assert answer.status_code == 200, answer.text
    events = [e for e in answer.text.split("\n\n") if e.startswith("data:")]
    assert events[0] + "\n\n" == OPENING
    assert "".join(e + "\n\n" for e in events) == "".join(frames)


def test_filter_results_survive_an_answer_in_the_other_shape(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A gateway that streams a call asked whole, or answers whole one asked streamed: the
    proxy builds the shape the client asked for, ``prompt_filter_results`` in it."""
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    frames = [
        OPENING,
        _chunk({"role": "assistant", "content": "hello"}, "stop"),
        "data: [DONE]\n\n",
    ]
    fake_upstream.script(
        raw(*frames),
        raw(_whole(), headers={"content-type": "application/json"}),
        endpoint=CHAT,
    )
    with httpx.Client(base_url=proxy.origin, headers={"authorization": "Bearer sk-t0123"}) as http:
        whole = http.post("/v1/chat/completions", json=_CHAT)
        assert whole.status_code == 200, whole.text
        assert whole.json()["prompt_filter_results"] == PROMPT_FILTERS
        streamed = http.post("/v1/chat/completions", json={**_CHAT, "stream": True})
    assert streamed.status_code == 200, streamed.text
    events = [e for e in streamed.text.split("\n\n") if e.startswith("data: {")]
    first = json.loads(events[0].removeprefix("data: "))
    assert first["choices"] == [] and first["prompt_filter_results"] == PROMPT_FILTERS
    assert "hello" in streamed.text
