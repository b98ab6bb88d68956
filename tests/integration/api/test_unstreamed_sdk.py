"""A provider that ignores ``stream`` and answers a whole completion, pretty-printed with
blank lines, of two choices, a tool call, logprobs and usage: the SDK's stream helper builds
from the proxy's chunks the completion the provider sent, as it would from a stream."""

from __future__ import annotations

import json
from pathlib import Path

import openai

from tests.fakes.replies import raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

_LOGPROBS = {
    "content": [{"token": "hi", "logprob": -0.25, "bytes": [104, 105], "top_logprobs": []}]
}
_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
_USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
_WHOLE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi"},
            "finish_reason": "stop",
            "logprobs": _LOGPROBS,
        },
        {
            "index": 1,
            "message": {"role": "assistant", "content": None, "tool_calls": [_CALL]},
            "finish_reason": "tool_calls",
            "logprobs": None,
        },
    ],
    "usage": _USAGE,
}


def test_the_sdk_reads_a_pretty_printed_whole_completion_as_its_stream(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    pretty = json.dumps(_WHOLE, indent=2).replace(",\n", ",\n\n")
    fake_upstream.script(raw(pretty, headers={"content-type": "application/json"}))
    client = openai.OpenAI(base_url=proxy.url, api_key="sk-unstreamed-client", max_retries=0)
    with client.chat.completions.stream(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        n=2,
        logprobs=True,
        stream_options={"include_usage": True},
    ) as stream:
        final = stream.get_final_completion()
    assert [c.message.content for c in final.choices] == ["hi", None]
    assert final.choices[0].logprobs is not None
    assert final.choices[0].logprobs.model_dump()["content"] == _LOGPROBS["content"]
    calls = final.choices[1].message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        ("call_1", "f", '{"a": 1}')
    ]
    assert [c.finish_reason for c in final.choices] == ["stop", "tool_calls"]
    assert final.usage is not None and final.usage.model_dump(exclude_none=True) == _USAGE
