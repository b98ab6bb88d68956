"""A thinking model whose thinking comes inline, ahead of its briefing (a ``<think>`` block:
Qwen3 or QwQ on a server without a reasoning parser, Groq's ``raw`` format), is given room to
think in ``max_tokens`` beyond the briefing's own bound. Only the briefing is held to that
bound: the thinking it was given room for is no sign of a provider that ignored it."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import ModelConfig
from proxy.config_context import SummarizeConfig
from proxy.services.compaction_job import _SUMMARY_OUTPUT_TOKENS, SummaryCallError, _call

_FULL = (
    "## Objective\nFix the parser\n\n## Decisions & Facts\n- keep the public API\n\n"
    "## Files & State\n(none)\n\n## Open Tasks\n- finish the fix\n\n## Next Step\nrun the tests"
)


class _Once:
    def __init__(self, content: str) -> None:
        choice = {"index": 0, "message": {"role": "assistant", "content": content}}
        self.text = json.dumps({"choices": [{**choice, "finish_reason": "stop"}]})
        self.status_code = 200

    def json(self) -> Any:
        return json.loads(self.text)

    async def call(self, *args: Any, **kwargs: Any) -> Any:
        return self


def _job() -> Any:
    return SimpleNamespace(
        session_id="s-1",
        provider=SimpleNamespace(base_url="http://p"),
        headers={},
        query=(),
        fast_model="qwen3:8b",
        fast_limits=ModelConfig(contextLimit=40_960),
        cfg=SummarizeConfig(maxAttempts=1, timeoutSeconds=5),
    )


def _count(messages: Any) -> int:
    return sum(len(m["content"]) // 4 for m in messages)


_THOUGHT = "word " * (_SUMMARY_OUTPUT_TOKENS * 2)  # twice the briefing's bound, in tokens


async def test_inline_thinking_does_not_count_against_the_briefings_bound() -> None:
    said = f"<think>\n{_THOUGHT}\n</think>\n\n{_FULL}"
    assert await _call(_Once(said), _job(), [{"role": "user", "content": "x"}], _count) == said


async def test_a_briefing_past_its_bound_after_the_thinking_is_still_refused() -> None:
    said = f"<think>\nshort\n</think>\n\n{_FULL}\n{_THOUGHT}"
    with pytest.raises(SummaryCallError, match="ignored the bound"):
        await _call(_Once(said), _job(), [{"role": "user", "content": "x"}], _count)
