"""A call to an OpenAI reasoning model bounds its thinking and its answer together
(``max_completion_tokens``): bounded at the answer's own length it may think the whole bound
away and answer nothing, cut at ``length``. Its bound holds room to think beyond the answer's,
and the summary's prompt leaves that room in the fast model's window."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.cascade.types import CompactionPlan
from proxy.config import ModelConfig
from proxy.config_context import SummarizeConfig
from proxy.services.compaction_job import _briefing_text, _Tally
from proxy.services.fastmodel import REASONING_ROOM, for_model, output_tokens
from proxy.services.promotion import _promote

_FULL = (
    "## Objective\nFix the parser\n\n## Decisions & Facts\n- keep the public API\n\n"
    "## Files & State\n(none)\n\n## Open Tasks\n- finish the fix\n\n## Next Step\nrun the tests"
)


def test_a_reasoning_models_bound_holds_room_to_think_beyond_the_answer() -> None:
    body = {"model": "m", "messages": [], "max_tokens": 2000, "temperature": 0}
    assert for_model("o4-mini", body)["max_completion_tokens"] == 2000 + REASONING_ROOM
    assert output_tokens("gpt-5-mini", 2000) == 2000 + REASONING_ROOM
    assert output_tokens("gpt-4o-mini", 2000) == 2000


def _count(msgs: Any) -> int:
    return sum(len(str(m.get("content") or "")) // 4 for m in msgs)


class _Upstream:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def call(self, *args: Any, content: bytes, **kwargs: Any) -> Any:
        self.bodies.append(json.loads(content))
        message = {"role": "assistant", "content": _FULL}
        text = json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
        return SimpleNamespace(status_code=200, text=text, json=lambda: json.loads(text))


@pytest.mark.parametrize("limit", [REASONING_ROOM + 20_000, 16_000])
async def test_the_summary_prompt_leaves_a_reasoning_model_its_whole_bound(limit: int) -> None:
    """A window configured smaller than the room (to keep summaries cheap) keeps most of it
    for the prompt: the room is at most a quarter of the window."""
    span = tuple({"role": "user", "content": f"{i} " + "word " * 2000} for i in range(60))
    plan = CompactionPlan(start=0, end=len(span), span=span, previous=None)
    job = SimpleNamespace(
        session_id="s-1",
        provider=SimpleNamespace(base_url="http://p"),
        headers={},
        query=(),
        fast_model="o4-mini",
        fast_limits=ModelConfig(contextLimit=limit),
        cfg=SummarizeConfig(maxAttempts=1, timeoutSeconds=5),
    )
    upstream = _Upstream()
    assert await _briefing_text(upstream, job, plan, _count, 1.0, _Tally()) == _FULL  # type: ignore[arg-type]
    (body,) = upstream.bodies
    assert _count(body["messages"]) + body["max_completion_tokens"] <= limit
    assert _count(body["messages"]) >= limit // 2


class _Lent:
    async def give_back(self) -> None:
        return None


async def test_the_extraction_prompt_leaves_a_reasoning_model_its_whole_bound() -> None:
    limit = REASONING_ROOM + 5_000
    span = [{"role": "user", "content": f"{i} " + "word " * 2000} for i in range(12)]
    job = SimpleNamespace(
        session_id="s-1",
        provider=SimpleNamespace(base_url="http://p"),
        headers={},
        query=(),
        fast_model="gpt-5-mini",
        fast_limits=ModelConfig(contextLimit=limit),
        memory_patterns=(),
    )
    upstream = _Upstream()
    with contextlib.suppress(Exception):  # the fact answer is no concern here
        await _promote(upstream, None, _Lent(), job, span, _count)  # type: ignore[arg-type]
    (body,) = upstream.bodies
    assert _count(body["messages"]) + body["max_completion_tokens"] <= limit


def test_a_fine_tuned_reasoning_model_is_one_by_its_base_name() -> None:
    """OpenAI names a fine-tuned model ``ft:<base>:<org>:<suffix>:<id>``: an o4-mini tuned by
    reinforcement fine-tuning takes only what o4-mini takes; a tuned gpt-4o-mini, as written."""
    body = {"model": "m", "messages": [], "max_tokens": 2000, "temperature": 0}
    tuned = for_model("ft:o4-mini-2025-04-16:acme:grader:AbC123", body)
    assert "max_tokens" not in tuned and "temperature" not in tuned
    assert for_model("ft:gpt-4o-mini-2024-07-18:acme::AbC123", body) is body


@pytest.mark.parametrize(
    "model",
    [
        "gemini-2.5-flash",
        "gemini-2.5-pro",
        "gemini-3-pro-preview",
        "google/gemini-2.5-flash",  # through OpenRouter
        "deepseek-reasoner",
        "deepseek-ai/DeepSeek-R1",  # Together, Fireworks
        "openai/gpt-oss-120b",  # Groq, OpenRouter, vLLM's name
        "gpt-oss:20b",  # Ollama's
        "qwen3:8b",  # Ollama's; thinks unless told not to
        "Qwen/QwQ-32B",
        "magistral-medium-latest",  # Mistral's reasoning model
        "moonshotai/kimi-k2-thinking",
    ],
)
def test_a_thinking_model_bounded_by_max_tokens_gets_its_room_in_max_tokens(model: str) -> None:
    """Regression: Gemini's thinking models (2.5 on, through its OpenAI endpoint or a router),
    DeepSeek's reasoner and the open thinking models the other hosts serve (gpt-oss, Qwen3,
    QwQ, Magistral, a ``-thinking`` name) count their thinking in ``max_tokens``; a summary
    bounded at the answer's own length was cut at ``length`` with nothing written, as
    OpenAI's reasoning models were. They take ``max_tokens``, which stays. The temperature
    goes: their makers advise against greedy decoding while they think (Qwen3's and QwQ's
    cards: it repeats itself endlessly; DeepSeek R1 0.5 to 0.7; Gemini 3 its default), and a
    loop runs to the bound, now with its room, on every attempt; the host's default is the
    one tuned for the model (an Ollama Modelfile's, vLLM's generation config)."""
    body = {"model": model, "messages": [], "max_tokens": 2000, "temperature": 0}
    sent = for_model(model, body, 1_048_576)
    assert sent["max_tokens"] == 2000 + REASONING_ROOM
    assert "temperature" not in sent and "max_completion_tokens" not in sent
    assert output_tokens(model, 2000, 32000) == 2000 + 8000  # a quarter of a small window


@pytest.mark.parametrize(
    "model",
    [
        "gemini-2.0-flash",
        "deepseek-chat",
        "gemini-1.5-pro",
        "Qwen/Qwen3-235B-A22B-Instruct-2507",  # the instruct models do not think
        "qwen3-coder:30b",
        "mistral-small-latest",
    ],
)
def test_a_model_that_does_not_think_keeps_the_answers_bound(model: str) -> None:
    body = {"model": model, "messages": [], "max_tokens": 2000, "temperature": 0}
    assert for_model(model, body) == body
