"""A whole ``chat.completion`` where a stream belongs (a provider that ignored ``stream``) is
read and relayed as its stream: an internal call in it is the proxy's as in any round, and
one the proxy cannot read or write as a stream ends the round with an error, never a crash."""

from __future__ import annotations

import json
from typing import Any

from proxy import sse
from proxy.chunks import StreamAccumulator
from proxy.services.relay import ClientStream
from tests.unit.test_relay import chunks, read_call, relay


def _client_view(got: list[bytes]) -> dict[str, Any]:
    """The message a client builds from the chunks it got."""
    acc = StreamAccumulator()
    for chunk in chunks(got):
        acc.add(chunk)
    return acc.message()


def _whole(message: dict[str, Any], finish: str = "stop", **more: Any) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return json.dumps({"id": "c-1", "object": "chat.completion", "choices": [choice], **more})


async def test_a_whole_completion_goes_out_as_its_stream_then_done() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    got, out = await relay([_whole({"content": "hi"}, usage=usage).encode()], ClientStream())
    assert out.error is None and out.complete and out.saw_done and out.unstreamed
    assert got[-1] == sse.DONE
    assert out.acc.message() == {"role": "assistant", "content": "hi"}
    assert out.acc.usage == usage == chunks(got)[-1]["usage"]


async def test_a_whole_completions_own_fields_are_read_as_a_streams_are() -> None:
    message = {"content": "4", "reasoning_content": "2 + 2", "annotations": [{"type": "x"}]}
    got, out = await relay([_whole(message).encode()], ClientStream())
    assert out.acc.message() == {"role": "assistant", **message}
    assert out.acc.message() == _client_view(got)


async def test_a_whole_completion_calling_only_read_tool_output_is_an_internal_round() -> None:
    body = _whole({"content": None, **read_call("int_1")}, "tool_calls").encode()
    got, out = await relay([body], ClientStream(), intercept=True)
    assert out.error is None and out.only_internal and got == []
    assert out.acc.message()["tool_calls"][0]["id"] == "int_1"


async def test_a_whole_completion_that_cannot_be_streamed_ends_the_round_with_an_error() -> None:
    malformed = _whole({"content": "x", "tool_calls": "run"})
    lone_surrogate = _whole({"content": "\ud800"})  # an escape JSON allows, no UTF-8 holds
    for body in (malformed, lone_surrogate):
        got, out = await relay([body.encode()], ClientStream())
        assert out.error is not None and not out.acc.indices and got == [], body


async def test_a_pretty_printed_completion_with_blank_lines_is_read_whole() -> None:
    """Its blank lines end no events: the body opens with ``{``, which no event does."""
    pretty = json.dumps(json.loads(_whole({"content": "hi"})), indent=2).replace(",\n", ",\n\n")
    body = b"\n" + pretty.encode()
    pieces = [body[:7], body[7:40], body[40:]]
    got, out = await relay(pieces, ClientStream())
    assert out.error is None and out.unstreamed and got[-1] == sse.DONE
    assert _client_view(got) == {"role": "assistant", "content": "hi"}


async def test_a_whole_completions_logprobs_tier_and_call_fields_go_out_in_its_chunks() -> None:
    logprobs = {"content": [{"token": "hi", "logprob": -0.1, "bytes": [104, 105]}]}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
        "extra_content": {"google": {"thought_signature": "sig"}},
    }
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "hi", "tool_calls": [call]},
        "finish_reason": "tool_calls",
        "logprobs": logprobs,
        "content_filter_results": {"hate": {"filtered": False}},
    }
    body = {"id": "c-1", "object": "chat.completion", "service_tier": "default"}
    got, out = await relay([json.dumps({**body, "choices": [choice]}).encode()], ClientStream())
    read = chunks(got)
    assert all(c["service_tier"] == "default" for c in read)
    carrying = [c["choices"][0] for c in read if c["choices"][0].get("logprobs")]
    assert [(c["delta"], c["logprobs"]) for c in carrying] == [({"content": "hi"}, logprobs)]
    assert read[-1]["choices"][0]["content_filter_results"] == {"hate": {"filtered": False}}
    assert _client_view(got)["tool_calls"] == [call]


async def test_a_whole_completion_after_a_byte_order_mark_is_read_whole() -> None:
    body = b"\xef\xbb\xbf" + json.dumps(json.loads(_whole({"content": "hi"})), indent=1).encode()
    got, out = await relay([body[:2], body[2:]], ClientStream())
    assert out.error is None and out.unstreamed
    assert _client_view(got) == {"role": "assistant", "content": "hi"}


async def test_a_whole_completions_call_without_arguments_has_empty_ones() -> None:
    """An SDK's stream helper reads a call whose deltas carry no ``arguments`` as None,
    which ``json.loads`` refuses: the head carries ``""``, as OpenAI's does."""
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    body = _whole({"content": None, "tool_calls": [call]}, "tool_calls").encode()
    got, _ = await relay([body], ClientStream())
    heads = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks(got)[1:2]]
    assert heads == [{"index": 0, **call}]
    assert _client_view(got)["tool_calls"] == [call]
