"""Streams of providers that are not OpenAI, read by the official SDK through the real proxy:
an error a provider sends inside a chat chunk (OpenRouter's mid-stream error beside a choice
finished with ``"error"``), which the SDK raises on and the proxy must not store as a whole
reply."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.sessions_helpers import live_messages
from tests.integration.transcripts import sdk

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
