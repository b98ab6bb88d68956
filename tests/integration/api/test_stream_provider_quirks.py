"""Streams of providers that are not OpenAI, read by the official SDK through the real proxy:
an error a provider sends inside a chat chunk (OpenRouter's mid-stream error beside a choice
finished with ``"error"``), alone or ending a round that called ``read_tool_output``, a usage
frame without ``choices`` the client did not ask for, and Azure's content-filter chunk after
the finish while ``read_tool_output`` is offered."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS, history
from tests.integration.api.sessions_helpers import live_messages, settled
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (its config cuts the history's tool output: the tool is offered)
)
from tests.integration.transcripts import blob, sdk

HEAD = {"id": "gen-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def frame(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return f"data: {json.dumps({**HEAD, **extra, 'choices': [choice]})}\n\n"


@pytest.mark.parametrize("done", [True, False], ids=["done", "closed"])
def test_an_error_inside_a_chunk_raises_in_the_sdk_and_stores_no_reply(
    proxy: Any, http: httpx.Client, fake_upstream: FakeUpstream, done: bool
) -> None:
    # OpenRouter's mid-stream failure: the error rides a chunk whose choice finishes with
    # "error". The SDK raises on any data with an "error"; a reply stored from the text before
    # it would be one the client never got whole.
    failure = {"code": "server_error", "message": "Provider disconnected unexpectedly"}
    frames = [
        frame({"role": "assistant", "content": ""}),
        frame({"content": "partial "}),
        frame({"content": ""}, "error", provider="openai", error=failure),
        *(["data: [DONE]\n\n"] if done else []),
    ]
    fake_upstream.script(raw(*frames), reply("later"))
    turn = [{"role": "user", "content": "go"}]
    stream = sdk(proxy, "in-chunk-error").chat.completions.create(
        model="m", messages=turn, stream=True
    )
    with pytest.raises(openai.APIError, match="Provider disconnected"):
        list(stream)
    assert live_messages(http, "in-chunk-error") == turn


@pytest.mark.parametrize("choices", [{}, {"choices": None}], ids=["no-choices", "null-choices"])
def test_a_usage_frame_without_choices_the_client_did_not_ask_for_is_not_relayed(
    proxy: Any, fake_upstream: FakeUpstream, choices: dict[str, Any]
) -> None:
    # The proxy asks every stream for its usage. A provider whose usage-only frame leaves
    # "choices" out (or null) must not send it to a client that never asked: the SDK's
    # stream helper iterates every chunk's choices and fails on it.
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    frames = [
        frame({"role": "assistant", "content": "hi"}),
        frame({}, "stop"),
        f"data: {json.dumps({**HEAD, **choices, 'usage': usage})}\n\n",
        "data: [DONE]\n\n",
    ]
    fake_upstream.script(raw(*frames))
    client = sdk(proxy, "usage-no-choices")
    with client.chat.completions.stream(
        model="m", messages=[{"role": "user", "content": "go"}]
    ) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "hi"
    assert final.usage is None


def test_azures_filter_chunk_after_the_finish_keeps_its_place_beside_read_tool_output(
    proxy: Any, fake_upstream: FakeUpstream
) -> None:
    # With read_tool_output offered the finish frame waits for the round's end (the round may
    # turn out the proxy's own); Azure's content-filter chunk that follows it must wait too,
    # not overtake it: the client reads the frames in the order the provider sent them.
    trailing = {"hate": {"filtered": False, "severity": "safe"}}
    offsets = {"check_offset": 0, "start_offset": 0, "end_offset": 2}
    filtered = {
        "index": 0,
        "finish_reason": None,
        "delta": {},
        "content_filter_results": trailing,
        "content_filter_offsets": offsets,
    }
    frames = [
        frame({"role": "assistant", "content": "ok"}),
        frame({}, "stop"),
        f"data: {json.dumps({**HEAD, 'choices': [filtered]})}\n\n",
        "data: [DONE]\n\n",
    ]
    fake_upstream.script(raw(*frames))
    messages = history("call_big", blob(9000, "big"))
    stream = sdk(proxy, "azure-trailing").chat.completions.create(
        model="m", messages=messages, tools=CLIENT_TOOLS, stream=True
    )
    seen = [chunk.choices[0].model_dump() for chunk in stream]
    assert "read_tool_output" in json.dumps(fake_upstream.bodies()[-1]["tools"])
    order = [(c["finish_reason"], "content_filter_offsets" in c) for c in seen]
    assert order == [(None, False), ("stop", False), (None, True)]


def test_an_error_chunk_ending_a_round_that_called_read_tool_output_reaches_the_sdk(
    proxy: Any, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    # The round called only the proxy's tool, so its ending is held back for the next round;
    # but the error chunk that ended it (a choice finished with "error", nothing in its delta)
    # is no ending to hide: the stream failed, and the client must hear it.
    failure = {"code": "server_error", "message": "Provider disconnected unexpectedly"}
    args = json.dumps({"handle": "call_big", "offset": 0})
    read = {"id": "int_1", "type": "function"}
    frames = [
        frame({"role": "assistant", "content": None}),
        frame({"tool_calls": [{"index": 0, **read, "function": {"name": "read_tool_output"}}]}),
        frame({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
        frame({}, "error", error=failure),
        "data: [DONE]\n\n",
    ]
    fake_upstream.script(raw(*frames), reply("unused"))
    messages = history("call_big", blob(9000, "big"))
    stream = sdk(proxy, "internal-error").chat.completions.create(
        model="m", messages=messages, tools=CLIENT_TOOLS, stream=True
    )
    with pytest.raises(openai.APIError, match="Provider disconnected"):
        list(stream)
    assert len(live_messages(http, "internal-error")) == len(messages)


def test_parallel_calls_split_over_chunks_are_stored_whole_before_a_trailing_filter_chunk(
    proxy: Any, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    # Two client calls, every id first, then names, then arguments in pieces, with the proxy's
    # tool offered (the finish frame is held) and Azure's filter chunk after the finish: the
    # stream helper and the stored turn each get both calls whole.
    def calls(*fragments: dict[str, Any]) -> str:
        return frame({"tool_calls": list(fragments)})

    def fn(index: int, **function: str) -> dict[str, Any]:
        return {"index": index, "function": function}

    filtered = {"index": 0, "finish_reason": None, "delta": {}, "content_filter_results": {}}
    frames = [
        frame({"role": "assistant", "content": None}),
        calls({"index": 0, "id": "call_a", "type": "function"}),
        calls({"index": 1, "id": "call_b", "type": "function"}),
        calls(fn(0, name="run_tests", arguments='{"k"'), fn(1, name="run_tests")),
        calls(fn(1, arguments='{"k": 2}'), fn(0, arguments=": 1}")),
        frame({}, "tool_calls"),
        f"data: {json.dumps({**HEAD, 'choices': [filtered]})}\n\n",
        "data: [DONE]\n\n",
    ]
    fake_upstream.script(raw(*frames))
    messages = history("call_big", blob(9000, "big"))
    with sdk(proxy, "split-calls").chat.completions.stream(
        model="m", messages=messages, tools=CLIENT_TOOLS
    ) as stream:
        final = stream.get_final_completion().choices[0]
    whole = [("call_a", '{"k": 1}'), ("call_b", '{"k": 2}')]
    assert [(c.id, c.function.arguments) for c in final.message.tool_calls or []] == whole
    assert final.finish_reason == "tool_calls"
    settled(http, "split-calls", len(messages) + 1)
    stored = live_messages(http, "split-calls")[-1]["tool_calls"]
    assert [(c["id"], c["function"]["arguments"]) for c in stored] == whole
