"""A compaction's summary call that the proxy's own budget of whole answers refuses
(``answer_budget``'s 503 ``server_busy``, before the call is sent or as its answer arrives) is
no attempt of the fast model's: the summary waits for room and asks again, where each
refusal spent one of its ``summarize.maxAttempts`` and a spent budget failed the compaction
(and grew the session's backoff) with nothing wrong with the fast model."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from proxy.answer_budget import AnswerBudget
from proxy.config import ModelConfig
from proxy.config_context import SummarizeConfig
from proxy.errors import ServerBusy
from proxy.services.compaction_job import _call

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
