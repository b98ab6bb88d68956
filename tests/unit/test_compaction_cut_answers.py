"""A summary answer the fast model did not finish is no briefing: one cut at ``max_tokens``
(``finish_reason`` ``length``) or stopped by the provider's content filter holds the
sections it reached and loses the rest, which the parse would fill with the previous
summary's stale text, so the call is retried and then fails like any unusable answer. A
refusal or a tool call in place of the briefing fails alike, its error saying which it was."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import ModelConfig
from proxy.config_context import SummarizeConfig
from proxy.services.compaction_job import SummaryCallError, _call

_FULL = (
    "## Objective\nFix the parser\n\n## Decisions & Facts\n- keep the public API\n\n"
    "## Files & State\n(none)\n\n## Open Tasks\n- finish the fix\n\n## Next Step\nrun the tests"
)
_CUT = "## Objective\nFix the parser\n\n## Decisions & Facts\n- keep the pub"


class _Reply:
    def __init__(self, content: str, finish_reason: str) -> None:
        self.status_code = 200
        choice = {"index": 0, "message": {"role": "assistant", "content": content}}
        self.text = json.dumps({"choices": [{**choice, "finish_reason": finish_reason}]})

    def json(self) -> Any:
        return json.loads(self.text)


class _Upstream:
    def __init__(self, *answers: tuple[str, str]) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def call(self, *args: Any, **kwargs: Any) -> _Reply:
        self.calls += 1
        return _Reply(*self.answers.pop(0))


def _job(attempts: int) -> Any:
    return SimpleNamespace(
        session_id="s-1",
        provider=SimpleNamespace(base_url="http://p"),
        headers={},
        query=(),
        fast_model="fast",
        fast_limits=ModelConfig(),
        cfg=SummarizeConfig(maxAttempts=attempts, timeoutSeconds=5),
    )


_PROMPT = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("reason", ["length", "content_filter", "error"])
async def test_an_answer_cut_short_is_unusable(reason: str) -> None:
    """``error``: a gateway's (OpenRouter's) answer that broke off when its provider failed."""
    upstream = _Upstream((_CUT, reason))
    with pytest.raises(SummaryCallError) as failed:
        await _call(upstream, _job(1), _PROMPT, len)  # type: ignore[arg-type]
    assert str(failed.value).startswith("unusable summary")
    assert reason in str(failed.value)


async def test_a_cut_answer_is_retried_and_the_finished_one_kept() -> None:
    upstream = _Upstream((_CUT, "length"), (_FULL, "stop"))
    assert await _call(upstream, _job(2), _PROMPT, len) == _FULL  # type: ignore[arg-type]
    assert upstream.calls == 2


async def test_an_answer_without_a_finish_reason_is_read_as_finished() -> None:
    upstream = _Upstream((_FULL, None))  # type: ignore[arg-type]
    assert await _call(upstream, _job(1), _PROMPT, len) == _FULL  # type: ignore[arg-type]


class _Said(_Reply):
    def __init__(self, **message: Any) -> None:
        self.status_code = 200
        choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
        self.text = json.dumps({"choices": [choice]})


class _Once:
    def __init__(self, reply: _Reply) -> None:
        self.reply = reply

    async def call(self, *args: Any, **kwargs: Any) -> _Reply:
        return self.reply


async def test_a_refusal_is_reported_as_one_with_its_text() -> None:
    said = _Said(content=None, refusal="I can't help with that.")
    with pytest.raises(SummaryCallError) as failed:
        await _call(_Once(said), _job(1), _PROMPT, len)  # type: ignore[arg-type]
    assert "refused" in str(failed.value) and "I can't help with that." in str(failed.value)


async def test_a_tool_call_is_reported_as_one() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    said = _Said(content=None, tool_calls=[call])
    with pytest.raises(SummaryCallError) as failed:
        await _call(_Once(said), _job(1), _PROMPT, len)  # type: ignore[arg-type]
    assert "tool call" in str(failed.value)
