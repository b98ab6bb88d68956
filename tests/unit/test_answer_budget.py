"""The process's budget of bytes held by whole answers (``proxy.answer_budget``): an answer
holds its bytes until it is freed; a call made while the budget is spent is a 503
``server_busy`` before anything is sent; one arriving over it waits for room, then is the
503; one alone larger than the budget is over its cap."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import httpx
import pytest

from proxy import answer_budget
from proxy.answer_budget import AnswerBudget
from proxy.config import ProviderConfig
from proxy.errors import ServerBusy, UpstreamBadResponse
from proxy.transport import build_client
from proxy.upstream import Upstream

PROVIDER = ProviderConfig(base_url="http://llm.test/v1")


def _upstream(budget: AnswerBudget, body: bytes, sent: list[int]) -> Upstream:
    def answer(_: httpx.Request) -> httpx.Response:
        sent.append(1)
        return httpx.Response(200, content=body)

    client = build_client(transport=httpx.MockTransport(answer))
    return Upstream(client, env={}, budget=budget)


async def _call(upstream: Upstream) -> object:
    return await upstream.call(
        PROVIDER, "POST", "/chat/completions", client_headers={}, content=b"{}", max_bytes=4096
    )


async def test_an_answer_holds_its_bytes_until_freed_and_a_spent_budget_sends_nothing() -> None:
    budget, sent = AnswerBudget(1000), []
    upstream = _upstream(budget, b" " * 990 + b"{}", sent)
    answer = await _call(upstream)
    assert budget.held == 992 and budget.busy() is False
    budget.held += 8  # another answer's bytes: the budget is spent
    with pytest.raises(ServerBusy, match="CASCADE_MAX_HELD_ANSWER_BYTES") as busy:
        await _call(upstream)
    assert busy.value.status_code == 503 and busy.value.code == "server_busy"
    assert len(sent) == 1  # refused before it was sent: no provider paid for it
    budget.held -= 8
    del answer
    gc.collect()
    assert budget.held == 0
    assert await _call(upstream) is not None and len(sent) == 2
    await upstream.client.aclose()


async def test_an_answer_alone_over_the_budget_is_over_its_cap() -> None:
    budget, sent = AnswerBudget(100), []
    upstream = _upstream(budget, b" " * 200 + b"{}", sent)
    with pytest.raises(UpstreamBadResponse, match="cap of 100 bytes"):
        await _call(upstream)
    assert budget.held == 0
    await upstream.client.aclose()


async def test_an_answer_arriving_over_the_budget_waits_for_room_then_is_a_503(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 0.2)
    budget = AnswerBudget(100)
    await budget.take(80)
    waiting = asyncio.create_task(budget.take(50))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    budget.give(80)  # room: the waiting answer goes on
    await waiting
    assert budget.held == 50
    with pytest.raises(ServerBusy, match="stayed spent for 0.2 s"):
        await budget.take(60)
    assert budget.held == 50


async def test_no_budget_counts_nothing() -> None:
    budget, sent = AnswerBudget(0), []
    upstream = _upstream(budget, b" " * 3000 + b"{}", sent)
    answer = await upstream.call(
        PROVIDER, "POST", "/chat/completions", client_headers={}, content=b"{}", max_bytes=None
    )
    assert budget.held == 0 and len(answer.content) == 3002  # type: ignore[attr-defined]
    await upstream.client.aclose()


async def test_room_given_on_another_thread_wakes_the_waiting_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A finalizer may give an answer's bytes back on whatever thread collects it."""
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 2.0)
    budget = AnswerBudget(100)
    await budget.take(80)
    waiting = asyncio.create_task(budget.take(50))
    await asyncio.sleep(0.05)
    # given while the loop sleeps: it must be woken, not find the room at its next turn
    timer = threading.Timer(0.05, budget.give, args=(80,))
    started = time.monotonic()
    timer.start()
    await asyncio.wait_for(waiting, 1.0)
    timer.join()
    assert budget.held == 50 and time.monotonic() - started < 0.5
