"""A memory promotion whose fast-model call the proxy's budget of whole answers refuses
(``ServerBusy``: no fault of the fast model's nor of the span's) waits for the budget's room
and asks again, as a summary does; one still refused when its bound ends stays owed, for
the session's next request to take over, rather than being settled as failed."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from proxy import answer_budget
from proxy.errors import ServerBusy
from proxy.services import promotion
from proxy.store import summaries
from tests.unit.test_promotion_log import _JOB, _count


class _Budget:
    def __init__(self) -> None:
        self.waits = 0

    async def room(self) -> None:
        self.waits += 1


class _Upstream:
    """Refuses its first ``refusals`` calls as the budget does, then answers no facts."""

    def __init__(self, refusals: int) -> None:
        self.refusals, self.calls, self.budget = refusals, 0, _Budget()

    async def call(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.refusals:
            raise ServerBusy("the proxy holds whole provider answers: retry shortly")
        answer = json.dumps({"choices": [{"message": {"content": '{"facts": []}'}}]})
        return SimpleNamespace(status_code=200, text=answer, json=lambda: json.loads(answer))


class _Lent:
    async def give_back(self) -> None:
        pass

    async def take(self) -> Any:
        return object()


_SPAN = [{"role": "user", "content": "we deploy with make release"}]


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []

    async def settle_owed(conn: Any, *, tenant: str, session_id: str, span: Any) -> None:
        spans.append(span)

    monkeypatch.setattr(summaries, "settle_owed", settle_owed)
    return spans


async def test_a_refused_extraction_waits_for_room_and_asks_again(
    settled: list[tuple[int, int]],
) -> None:
    upstream = _Upstream(refusals=2)
    await promotion.promote(upstream, None, _Lent(), _JOB, _SPAN, count=_count, owed=(0, 4))
    assert upstream.calls == 3 and upstream.budget.waits == 2
    assert settled == [(0, 4)]


async def test_one_refused_past_its_bound_stays_owed(
    settled: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(promotion, "BOUND_SECONDS", 0.3)
    upstream = _Upstream(refusals=1000)
    await promotion.promote(upstream, None, _Lent(), _JOB, _SPAN, count=_count, owed=(0, 4))
    assert upstream.calls >= 1 and settled == []


async def test_one_a_request_waits_on_waits_for_room_as_its_summary_does(
    settled: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forced compaction's request runs its promotion before it answers: the budget's
    room is waited for ``answer_budget.WAIT_SECONDS`` in all, as the summary's is, not the
    promotion's whole bound; the span then stays owed."""
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 0.3)
    upstream = _Upstream(refusals=1000)
    async with asyncio.timeout(3):
        await promotion.promote(
            upstream, None, _Lent(), _JOB, _SPAN, count=_count, owed=(0, 4), waited_on=True
        )
    assert upstream.calls >= 1 and settled == []


async def test_one_run_apart_waits_within_its_own_bound(
    settled: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hard threshold's job is waited on, but its promotion runs apart (no request waits
    for it): the budget's room is waited for within the promotion's own bound."""
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 0.05)
    monkeypatch.setattr(promotion, "BOUND_SECONDS", 0.5)
    upstream = _Upstream(refusals=1000)
    job = SimpleNamespace(**{**vars(_JOB), "waited_on": True})
    await promotion.promote(upstream, None, _Lent(), job, _SPAN, count=_count, owed=(0, 4))
    assert upstream.calls >= 2 and settled == []
