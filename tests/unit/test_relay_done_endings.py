"""``[DONE]`` after a chunk that carries no choice, or after comments only, is an answer's end
when a chat chunk or a provider's error came before it: the rule that a ``[DONE]`` before any
chat chunk is no answer must not reach the usage chunk (``stream_options.include_usage``) that
follows real chunks, an internal round's, or a provider's error between keep-alives."""

from __future__ import annotations

import pytest

from proxy import sse
from proxy.services.relay import ClientStream
from tests.unit.test_relay import frame, read_call, relay

USAGE = b'data: {"id": "c-1", "choices": [], "usage": {"prompt_tokens": 3, "total_tokens": 4}}\n\n'


@pytest.mark.parametrize("intercept", [False, True])
async def test_done_after_a_usage_only_chunk_that_follows_real_chunks_is_a_success(
    intercept: bool,
) -> None:
    pieces = [frame({"content": "a"}), frame({}, "stop"), USAGE, sse.DONE]
    got, out = await relay(pieces, ClientStream(), intercept=intercept)
    assert out.error is None and out.complete and out.saw_done
    assert sse.DONE in b"".join(got)


async def test_an_internal_rounds_done_after_its_usage_chunk_ends_it_quietly() -> None:
    pieces = [frame(read_call("r1")), frame({}, "tool_calls"), USAGE, sse.DONE]
    _, out = await relay(pieces, ClientStream(), intercept=True)
    assert out.error is None and out.complete and out.saw_done


async def test_keepalives_then_done_after_an_error_chunk_end_with_the_providers_error() -> None:
    failure = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    pieces = [b": keep-alive\n\n", failure, b": keep-alive\n\n", sse.DONE]
    got, out = await relay(pieces, ClientStream())
    assert out.provider_error == "type 'server_error'"
    assert "no chat stream" not in (out.error or "")
    assert got[-1] == sse.DONE and failure in got
