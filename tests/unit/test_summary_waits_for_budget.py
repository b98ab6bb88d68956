"""A compaction's summary call that the proxy's own budget of whole answers refuses
(``answer_budget``'s 503 ``server_busy``, before the call is sent or as its answer arrives) is
no attempt of the fast model's: the summary waits for room and asks again, where each
refusal spent one of its ``summarize.maxAttempts`` and a spent budget failed the compaction
(and grew the session's backoff) with nothing wrong with the fast model. A budget spent
past ``summarize.timeoutSeconds`` defers the summary (``SummaryDeferred``, reported as
``server_busy``, which leaves no backoff)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.answer_budget import AnswerBudget
from proxy.cascade.types import CompactionPlan
from proxy.config import ModelConfig
from proxy.config_context import SummarizeConfig
from proxy.errors import ServerBusy
from proxy.services.compaction_job import SummaryDeferred, _call, summarise

_BRIEFING = (
    "## Objective\nFix the parser\n\n## Decisions & Facts\n- keep the API\n\n"
    "## Files & State\n(none)\n\n## Open Tasks\n- finish\n\n## Next Step\nrun the tests"
)
_ANSWER = {
    "choices": [{"message": {"role": "assistant", "content": _BRIEFING}, "finish_reason": "stop"}]
}


class _Reply:
    status_code, text, request = 200, json.dumps(_ANSWER), None

    def json(self) -> Any:
        return _ANSWER


class _Upstream:
    """Refuses as ``Upstream.call`` does while its budget is spent; one refusal comes as
    the answer arrives (the budget had room when the call was sent)."""

    def __init__(self) -> None:
        self.budget = AnswerBudget(100)
        self.sent = 0

    async def call(self, *args: Any, **kwargs: Any) -> _Reply:
        self.budget.refuse_if_busy()
        self.sent += 1
        if self.sent == 1:
            raise ServerBusy("stayed spent while this answer arrived")
        return _Reply()


_JOB = SimpleNamespace(
    session_id="s-1",
    provider=SimpleNamespace(base_url="http://p", name="p"),
    headers={},
    query=(),
    fast_model="fast",
    fast_limits=ModelConfig(),
    cfg=SummarizeConfig(maxAttempts=1),
)


async def test_a_spent_budget_is_waited_out_and_counts_no_attempt() -> None:
    upstream = _Upstream()

    async def spend_then_free() -> None:
        await upstream.budget.take(100)  # spent: the next call is refused before it is sent
        await asyncio.sleep(0.3)
        upstream.budget.give(100)

    freeing = asyncio.create_task(spend_then_free())
    await asyncio.sleep(0)
    prompt = [{"role": "user", "content": "x"}]
    text = await asyncio.wait_for(_call(upstream, _JOB, prompt, len), 5)  # type: ignore[arg-type]
    await freeing
    assert text == _BRIEFING
    assert upstream.sent == 2  # the one refused on arrival, then the answer: one attempt


async def test_room_returns_at_once_when_the_budget_is_not_spent() -> None:
    budget = AnswerBudget(100)
    await asyncio.wait_for(budget.room(), 0.1)


async def test_a_budget_spent_past_the_summarys_deadline_defers_it() -> None:
    upstream = _Upstream()
    await upstream.budget.take(100)  # spent, and never given back
    job: Any = SimpleNamespace(**{**vars(_JOB), "cfg": SummarizeConfig(timeoutSeconds=0.3)})
    plan = CompactionPlan(0, 1, ({"role": "user", "content": "hi"},), None)
    with pytest.raises(SummaryDeferred) as deferred:
        await summarise(upstream, job, plan, count=lambda ms: len(str(ms)))  # type: ignore[arg-type]
    assert deferred.value.attempts == 0 and upstream.sent == 0
    assert "CASCADE_MAX_HELD_ANSWER_BYTES" in str(deferred.value)
    assert "later compaction" not in str(deferred.value)  # a forced one's 503 quotes it
