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
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from proxy import answer_budget
from proxy.answer_budget import AnswerBudget, RoomWait
from proxy.cascade.types import CompactionPlan
from proxy.config import ModelConfig
from proxy.config_context import SummarizeConfig
from proxy.errors import ServerBusy
from proxy.services import compaction_fold
from proxy.services.compaction import DurableSummarizer
from proxy.services.compaction_job import CompactionJob, SummaryDeferred, _call, summarise

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
    waited_on=False,
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


async def test_a_summary_a_request_waits_on_waits_for_the_budget_only_briefly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hard or overflow turn, or a forced compaction, waits on its summary: a budget spent
    past the budget's own wait (``WAIT_SECONDS``) defers it then, not after the whole
    ``summarize.timeoutSeconds``, so the turn goes on with the overflow guard (a forced one
    answers its 503 to retry) promptly."""
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 0.2)
    upstream = _Upstream()
    await upstream.budget.take(100)  # spent, and never given back
    cfg = SummarizeConfig(timeoutSeconds=30)
    job: Any = SimpleNamespace(**{**vars(_JOB), "cfg": cfg, "waited_on": True})
    plan = CompactionPlan(0, 1, ({"role": "user", "content": "hi"},), None)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(SummaryDeferred) as deferred:
        await asyncio.wait_for(summarise(upstream, job, plan, count=lambda ms: len(str(ms))), 5)  # type: ignore[arg-type]
    assert loop.time() - t0 < 2
    assert deferred.value.attempts == 0 and upstream.sent == 0
    assert "0.2 s" in str(deferred.value) and "timeoutSeconds" not in str(deferred.value)


async def test_a_background_summary_waits_past_the_budgets_own_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 0.1)
    upstream = _Upstream()

    async def spend_then_free() -> None:
        await upstream.budget.take(100)
        await asyncio.sleep(0.4)  # past WAIT_SECONDS: a background summary still waits
        upstream.budget.give(100)

    freeing = asyncio.create_task(spend_then_free())
    await asyncio.sleep(0)
    plan = CompactionPlan(0, 1, ({"role": "user", "content": "hi"},), None)
    brief = await asyncio.wait_for(
        summarise(upstream, _JOB, plan, count=lambda ms: len(str(ms))),  # type: ignore[arg-type]
        5,
    )
    await freeing
    assert brief.content.startswith("## Objective")


async def test_a_compaction_run_for_a_waiting_caller_is_waited_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``compact_now`` (a hard or overflow turn, a forced compaction) marks its job so its
    summary waits for the budget only briefly; a background one keeps the mark off."""
    seen: list[bool] = []

    async def run(self: DurableSummarizer, job: CompactionJob, **_: Any) -> None:
        seen.append(job.waited_on)

    monkeypatch.setattr(DurableSummarizer, "_run", run)
    summarizer = DurableSummarizer(
        pool=None,  # type: ignore[arg-type]  # never reached
        upstream=None,  # type: ignore[arg-type]
        bus=None,  # type: ignore[arg-type]
        count=len,  # type: ignore[arg-type]
    )
    job = CompactionJob(
        tenant="t", session_id="s", provider=None, fast_model="fast", fast_limits=None,
        cfg=None, headers={}, trigger="hard",
    )  # type: ignore[arg-type]  # fmt: skip
    await summarizer.compact_now(job)
    assert seen == [True] and not job.waited_on


class _Arriving(_Upstream):
    """Sends every call (the budget has room then) and holds each answer as it arrives, as
    ``answers.read_capped`` does: it waits for room there."""

    async def call(self, *args: Any, **kwargs: Any) -> _Reply:
        self.budget.refuse_if_busy()
        self.sent += 1
        await self.budget.take(50)
        return _Reply()


async def test_a_deadline_that_cuts_an_answer_waiting_for_room_defers_the_summary() -> None:
    """``summarize.timeoutSeconds`` running out while the answer waits for room as it
    arrives is the budget's doing too: ``server_busy`` (no backoff), not ``summary_failed``."""
    upstream = _Arriving()
    await upstream.budget.take(60)  # room for a call, none for its answer
    job: Any = SimpleNamespace(**{**vars(_JOB), "cfg": SummarizeConfig(timeoutSeconds=0.3)})
    plan = CompactionPlan(0, 1, ({"role": "user", "content": "hi"},), None)
    with pytest.raises(SummaryDeferred):
        await summarise(upstream, job, plan, count=lambda ms: len(str(ms)))  # type: ignore[arg-type]
    assert upstream.sent == 1 and upstream.budget.held == 60


async def test_a_background_summary_a_request_joins_waits_for_the_budget_only_briefly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hard turn that finds a background compaction running waits on it: once it joins
    (``RoomWait.join``), the summary's wait for room ends ``WAIT_SECONDS`` on, as its own
    compaction's would, not at ``summarize.timeoutSeconds``."""
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 0.2)
    upstream = _Upstream()
    await upstream.budget.take(100)  # spent, and never given back
    job: Any = SimpleNamespace(**{**vars(_JOB), "cfg": SummarizeConfig(timeoutSeconds=30)})
    plan = CompactionPlan(0, 1, ({"role": "user", "content": "hi"},), None)
    room = RoomWait()
    summary = summarise(upstream, job, plan, count=lambda ms: len(str(ms)), room=room)  # type: ignore[arg-type]
    task = asyncio.create_task(summary)
    await _until(lambda: upstream.budget._freed is not None)  # it waits for room
    room.join()
    with pytest.raises(SummaryDeferred) as deferred:
        await asyncio.wait_for(task, 5)
    assert "0.2 s" in str(deferred.value) and "timeoutSeconds" not in str(deferred.value)


async def test_a_request_waiting_on_a_background_compaction_joins_its_summarys_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate, rooms = asyncio.Event(), []

    async def run_background(self: DurableSummarizer, job: CompactionJob) -> None:
        span = compaction_fold.Span(uuid.uuid4(), None, 0, [], [{"pos": 0}, {"pos": 1}], plan, 9)  # type: ignore[list-item]
        monkeypatch.setattr(compaction_fold, "read_span", _returning(span))
        monkeypatch.setattr(compaction_fold, "report_started", _returning(True))
        await gate.wait()
        with pytest.raises(LookupError):
            await self._fold(_Lent(), job, uuid.uuid4())  # type: ignore[arg-type]

    async def summarise(*args: Any, room: Any = None, **kwargs: Any) -> None:
        rooms.append(room)
        raise LookupError

    plan = CompactionPlan(0, 1, ({"role": "user", "content": "hi"},), None)
    monkeypatch.setattr(DurableSummarizer, "_run_background", run_background)
    monkeypatch.setattr(compaction_fold, "summarise", summarise)
    summarizer = DurableSummarizer(pool=None, upstream=None, bus=None, count=len)  # type: ignore[arg-type]
    job = CompactionJob(
        tenant="t", session_id="s", provider=None, fast_model="fast", fast_limits=None,
        cfg=None, headers={}, trigger="soft",
    )  # type: ignore[arg-type]  # fmt: skip
    assert summarizer.start_background(job)
    room = summarizer.rooms[("t", "s")]
    assert not room.waited_on
    waiting = asyncio.create_task(summarizer.wait_inflight("t", "s"))
    await _until(lambda: room.waited_on)
    gate.set()
    await asyncio.wait_for(waiting, 5)
    assert rooms == [room] and summarizer.rooms == {}


async def _until(state: Any) -> None:
    """Wait (a few loop turns, 2 s at most) until ``state()`` holds."""

    async def polled() -> None:
        while not state():
            await asyncio.sleep(0)

    await asyncio.wait_for(polled(), 2)


def _returning(value: Any) -> Any:
    async def returned(*args: Any, **kwargs: Any) -> Any:
        return value

    return returned


class _Lent:
    async def take(self) -> None:
        return None

    async def give_back(self) -> None:
        return None
