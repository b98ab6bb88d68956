"""``AnswerBudget.room`` sees room a ``give`` made while it set up its wait: a finalizer
(``Lease.tie``) may run ``give`` in a collection set off by any allocation, the wait's own
event's included, and then finds no event to set. The wait has no timeout of its own, so a
wake-up lost there would leave a summary waiting for a ``give`` that may never come."""

from __future__ import annotations

import asyncio

import pytest

from proxy import answer_budget
from proxy.answer_budget import AnswerBudget


async def test_room_returns_when_a_give_runs_while_its_event_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    budget = AnswerBudget(100)
    budget.held = 100
    made = asyncio.Event

    def event_made_in_a_collection() -> asyncio.Event:
        budget.give(100)  # a finalizer run by the collection the allocation set off
        return made()

    monkeypatch.setattr(answer_budget.asyncio, "Event", event_made_in_a_collection)
    await asyncio.wait_for(budget.room(), 1.0)
    assert budget.held == 0


async def test_room_waits_for_a_give_and_then_returns() -> None:
    budget = AnswerBudget(100)
    budget.held = 100
    waiting = asyncio.create_task(budget.room())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    budget.give(1)
    await asyncio.wait_for(waiting, 1.0)


async def test_an_answer_takes_the_room_a_give_made_while_its_wait_was_set_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``take`` alike: it waited out its ``WAIT_SECONDS`` (5 s) with the room free."""
    budget = AnswerBudget(100)
    budget.held = 100
    made = asyncio.Event

    def event_made_in_a_collection() -> asyncio.Event:
        budget.give(100)
        return made()

    monkeypatch.setattr(answer_budget.asyncio, "Event", event_made_in_a_collection)
    await asyncio.wait_for(budget.take(60), 1.0)
    assert budget.held == 60
