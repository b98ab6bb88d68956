"""A provider (a gateway that always streams) that answers a call asking for a whole answer
with an event stream: the client gets the completion its chunks build, as JSON, and the
reply is stored; one cut short is the 502 it was."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

_SSE = {"content-type": "text/event-stream"}


def _event(delta: dict[str, object], finish: str | None = None, **more: object) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c-1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return f"data: {json.dumps({**chunk, **more})}\n\n"


def test_a_streamed_answer_to_a_whole_call_is_the_completion_it_builds(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    usage = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    body = (
        _event({"role": "assistant", "content": ""})
        + _event({"content": "hel"})
        + _event({"content": "lo"})
        + _event({}, "stop")
        + f"data: {json.dumps({'id': 'c-1', 'choices': [], 'usage': usage})}\n\n"
        + "data: [DONE]\n\n"
    )
    fake_upstream.script(raw(body, headers=_SSE), raw(_event({"content": "cut"}), headers=_SSE))
    client = openai.OpenAI(base_url=proxy.url, api_key="sk-streamed-whole", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    answer = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "hello"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.total_tokens == 6
    with pytest.raises(openai.APIStatusError) as cut:
        client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert cut.value.status_code == 502
