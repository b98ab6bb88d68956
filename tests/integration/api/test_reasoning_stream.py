"""A streamed reply keeps the provider's own text fields, as a non-streamed one does.

DeepSeek (and vLLM's reasoning parsers) stream the model's reasoning as
``delta.reasoning_content`` beside ``delta.content``; a client that keeps it (LiteLLM's
stream builder, so mini-swe-agent's recorded runs) resends the reply with it. The stored
reply of the stream is that message, so the next request takes the fast path and the
session's messages hold the reasoning, as they do for the same answer not streamed.
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


def _deepseek_stream() -> tuple[str, ...]:
    return (
        _frame({"role": "assistant", "content": None, "reasoning_content": "The user "}),
        _frame({"content": None, "reasoning_content": "wants a greeting."}),
        _frame({"content": "Hel", "reasoning_content": None}),
        _frame({"content": "lo"}),
        _frame({}, "stop"),
        "data: [DONE]\n\n",
    )


def test_a_streamed_replys_reasoning_is_stored_and_its_resend_supersedes_nothing(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(raw(*_deepseek_stream()))
    headers = {"X-Session-Id": "ds"}
    messages: list[Any] = [user("say hello")]
    client.chat.completions.create(
        model=MODEL, messages=messages, stream=True, extra_headers=headers
    ).close()
    settled(http, "ds", 2)
    stored = http.get("/v1/sessions/ds/messages").json()["data"][1]["message"]
    assert stored["reasoning_content"] == "The user wants a greeting."
    resent = {
        "role": "assistant",
        "content": "Hello",
        "reasoning_content": "The user wants a greeting.",
    }
    messages += [resent, user("thanks")]
    client.chat.completions.create(model=MODEL, messages=messages, extra_headers=headers)
    assert settled(http, "ds", 4)["superseded_count"] == 0
