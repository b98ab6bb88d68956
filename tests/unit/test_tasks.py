"""``tasks.stop_task``: a background task cancelled and awaited, its own cancellation not
raised again, and the caller's own cancellation never swallowed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from proxy.tasks import stop_task


async def _caller_cancelled_as_it_stops(
    worker: Callable[[], Awaitable[None]], letting_go: asyncio.Event
) -> None:
    """A caller stopping ``worker``'s task is cancelled once the task begins to let go
    (``letting_go``): the caller ends cancelled, the rest of it not run, the task done."""
    task = asyncio.create_task(worker())
    await asyncio.sleep(0)
    after = []

    async def caller() -> None:
        await stop_task(task)
        after.append("went on")

    outer = asyncio.create_task(caller())
    await letting_go.wait()
    outer.cancel()
    await asyncio.gather(outer, return_exceptions=True)
    assert outer.cancelled() and after == []
    assert task.done()


async def test_the_tasks_cancellation_is_its_expected_end() -> None:
    task = asyncio.create_task(asyncio.sleep(3600))
    await asyncio.sleep(0)
    await stop_task(task)
    assert task.cancelled()


async def test_a_task_already_ended_is_let_be() -> None:
    task = asyncio.create_task(asyncio.sleep(0))
    await task
    await stop_task(task)
    assert task.done() and not task.cancelled()


async def test_a_caller_cancelled_while_it_waits_is_cancelled_still() -> None:
    """A shutdown under a deadline (``asyncio.timeout``) cancels the caller while the task
    lets go of what it holds: that cancellation is the caller's, and swallowing it as the
    task's would run the rest of the caller as if no one had asked it to stop."""
    letting_go = asyncio.Event()

    async def worker() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            letting_go.set()
            await asyncio.sleep(3600)  # a slow clean-up, cut short by the caller's cancel

    await _caller_cancelled_as_it_stops(worker, letting_go)


async def test_a_clean_up_run_under_the_callers_cancellation_still_stops_the_task() -> None:
    """A caller already being cancelled (its ``finally``) stops each of its tasks in turn:
    the cancellation it is under was asked before, not while it waited."""
    first = asyncio.create_task(asyncio.sleep(3600))
    second = asyncio.create_task(asyncio.sleep(3600))
    after = []

    async def caller() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await stop_task(first)
            await stop_task(second)
            after.append("both stopped")

    outer = asyncio.create_task(caller())
    await asyncio.sleep(0)
    outer.cancel()
    await asyncio.gather(outer, return_exceptions=True)
    assert outer.cancelled() and after == ["both stopped"]
    assert first.cancelled() and second.cancelled()


async def test_a_caller_cancelled_while_a_task_swallows_it_is_cancelled_still() -> None:
    """A task whose clean-up suppresses the cancellation the caller's passes on to it (a
    ``suppress(CancelledError)`` around closing a connection) ends without raising: the
    caller's cancellation, counted in ``Task.cancelling``, is still the caller's."""
    letting_go = asyncio.Event()

    async def worker() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            letting_go.set()
            with contextlib.suppress(asyncio.CancelledError):  # its clean-up cut short
                await asyncio.sleep(3600)

    await _caller_cancelled_as_it_stops(worker, letting_go)
