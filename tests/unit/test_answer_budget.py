"""The process's budget of bytes held by whole answers (``proxy.answer_budget``): an answer
holds its bytes until it is freed; a call made while the budget is spent is a 503
``server_busy`` before anything is sent; one arriving over it waits for room, then is the
503; one alone larger than the budget is over its cap."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from proxy import answer_budget, upstream as upstream_module
from proxy.answer_budget import AnswerBudget, Lease
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


async def _one_waiting(
    monkeypatch: pytest.MonkeyPatch, wait_seconds: float
) -> tuple[AnswerBudget, asyncio.Task[None]]:
    """A budget of 100 bytes with 80 held, and a take of 50 waiting for room, up to
    ``wait_seconds`` (``WAIT_SECONDS``)."""
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", wait_seconds)
    budget = AnswerBudget(100)
    await budget.take(80)
    waiting = asyncio.create_task(budget.take(50))
    await asyncio.sleep(0.05)
    return budget, waiting


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
    budget, waiting = await _one_waiting(monkeypatch, 0.2)
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
    budget, waiting = await _one_waiting(monkeypatch, 2.0)
    # given while the loop sleeps: it must be woken, not find the room at its next turn
    timer = threading.Timer(0.05, budget.give, args=(80,))
    started = time.monotonic()
    timer.start()
    await asyncio.wait_for(waiting, 1.0)
    timer.join()
    assert budget.held == 50 and time.monotonic() - started < 0.5


class _ClosingFails(httpx.AsyncByteStream):
    """A body read whole, whose connection's close then fails: ``error`` (a client gone
    while it closes: the task's cancellation, or a transport fault)."""

    def __init__(self, body: bytes, error: BaseException) -> None:
        self._body, self._error = body, error

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        yield self._body

    async def aclose(self) -> None:
        raise self._error


@pytest.mark.parametrize("error", [asyncio.CancelledError(), RuntimeError("reset")])
async def test_answers_read_then_failed_give_their_bytes_back(error: BaseException) -> None:
    """After N answers whose call fails once their body is read (its close cancelled or
    broken), the budget is whole again: nothing holds those bytes."""
    budget = AnswerBudget(10_000)

    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_ClosingFails(b" " * 998 + b"{}", error))

    upstream = Upstream(build_client(transport=httpx.MockTransport(answer)), env={}, budget=budget)
    for _ in range(5):
        with pytest.raises(type(error)):
            await _call(upstream)
    assert budget.held == 0
    await upstream.client.aclose()


async def test_an_answer_failing_after_its_read_gives_its_bytes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failure between the read and the answer (its scrubbing, its metrics) leaves no
    answer to free: its bytes go back at once, or they would be lost to the budget."""

    def broken(*_: object) -> object:
        raise RuntimeError("broken")

    monkeypatch.setattr(upstream_module, "scrubbed", broken)
    budget, sent = AnswerBudget(10_000), []
    upstream = _upstream(budget, b" " * 998 + b"{}", sent)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="broken"):
            await _call(upstream)
    assert budget.held == 0
    await upstream.client.aclose()


class _Stalls(httpx.AsyncByteStream):
    """A body whose first piece arrives and whose rest never does."""

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        yield b" " * 600
        await asyncio.Event().wait()


async def test_answers_cancelled_mid_read_or_waiting_for_room_give_their_bytes_back() -> None:
    """A client gone while its answer arrives (its task cancelled mid-read), or while the
    answer waits for room: after N of them the budget holds only what it held before."""
    budget = AnswerBudget(1000)
    stalls = httpx.MockTransport(lambda _: httpx.Response(200, stream=_Stalls()))
    upstream = Upstream(build_client(transport=stalls), env={}, budget=budget)
    for held in (0, 500):  # mid-read; then waiting, 600 bytes having no room beside 500
        budget.held = held
        calls = [asyncio.create_task(_call(upstream)) for _ in range(5)]
        await asyncio.sleep(0.05)
        assert budget.held == held + 600 * (held == 0)  # one read its piece, the rest wait
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        assert budget.held == held
    await upstream.client.aclose()


async def test_bytes_given_on_another_thread_and_taken_on_the_loop_all_count() -> None:
    """A finalizer gives bytes back on whatever thread collects while the loop takes others':
    every one of both is counted (a thread switch inside an unlocked ``+=`` lost one)."""
    interval, count = sys.getswitchinterval(), 50_000
    budget = AnswerBudget(1 << 40)
    budget.held = count
    giver = threading.Thread(target=lambda: [budget.give(1) for _ in range(count)])
    sys.setswitchinterval(1e-6)  # switch threads as often as it can
    try:
        giver.start()
        for _ in range(count):
            await budget.take(1)
        giver.join()
    finally:
        sys.setswitchinterval(interval)
    assert budget.held == count


@pytest.mark.parametrize(
    ("limits", "budget"),
    [
        ({"v2": "1073741824\n"}, 256 << 20),  # a 1 GiB container: a quarter of it
        ({"v2": "max\n"}, 512 << 20),  # no limit
        ({"v2": "17179869184\n"}, 512 << 20),  # 16 GiB: the most it gets
        ({"v1": "9223372036854771712\n"}, 512 << 20),  # v1's no limit
        ({"v1": "536870912\n"}, 128 << 20),
        ({}, 512 << 20),  # no cgroup to read
    ],
)
def test_the_default_budget_is_a_quarter_of_the_containers_memory_at_most_512_mib(
    tmp_path: Path, limits: dict[str, str], budget: int
) -> None:
    """Parsed, answers hold their bytes again or a few times them: half a 1 GiB container's
    memory in raw answers would be more than it has."""
    for name, text in limits.items():
        (tmp_path / name).write_text(text)
    assert answer_budget.default_limit((str(tmp_path / "v2"), str(tmp_path / "v1"))) == budget


async def test_answers_that_would_all_wait_on_each_other_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two answers half read that each need the other's room: the second to find none is
    the 503 at once, its bytes given back, and the first goes on, where both waited out
    ``WAIT_SECONDS`` holding what the other needed."""
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 2.0)
    budget = AnswerBudget(100)
    first, second = Lease(budget), Lease(budget)
    await first.grow(40)
    await second.grow(40)
    waiting = asyncio.create_task(first.grow(40))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(ServerBusy, match="wait for each other"), second:
        await second.grow(40)
    assert time.monotonic() - started < 1.0
    await asyncio.wait_for(waiting, 1.0)
    assert budget.held == first.size == 80
