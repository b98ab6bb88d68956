"""``proxy.stopping``: the stop's clock, and the bounded wait for background work."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest
from sse_starlette.sse import AppStatus

from proxy import cli_run
from proxy.settings import Settings
from proxy.stopping import (
    POLL_SECONDS,
    STORE_SECONDS,
    StopClock,
    stop_requested,
    watch_stop,
    within_grace,
)


async def test_the_grace_runs_from_the_first_begin_and_wakes_each_watcher_once() -> None:
    clock = StopClock(grace=0.1)
    assert clock.left() is None and not clock.expired
    woken: list[str] = []
    unwatch = clock.watch(lambda: woken.append("a"))
    clock.watch(lambda: woken.append("b"))()  # unwatched at once: never woken
    clock.begin()
    await asyncio.sleep(0.05)
    clock.begin()  # a second signal: the same deadline
    left = clock.left()
    assert left is not None and left < 0.06
    await asyncio.wait_for(clock.ended(), timeout=1)
    assert clock.expired and woken == ["a"] and clock.left() == 0
    unwatch()
    assert clock.ended().done()


async def test_within_grace_waits_for_work_added_while_it_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = StopClock(grace=1.0)
    tasks: set[asyncio.Task[None]] = set()
    done: list[str] = []

    async def work(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        done.append(name)
        if name == "first":  # as a compaction that starts its promotion during the stop
            tasks.add(asyncio.create_task(work("added", 0.05)))

    tasks.add(asyncio.create_task(work("first", 0.05)))
    clock.begin()
    assert await within_grace(clock, tasks, "jobs", "lost") == 0
    assert done == ["first", "added"]
    assert not caplog.records


async def test_within_grace_says_what_it_leaves_running(caplog: pytest.LogCaptureFixture) -> None:
    clock = StopClock(grace=0.05)
    task = asyncio.create_task(asyncio.sleep(10))
    with caplog.at_level(logging.WARNING, logger="cascade"):
        assert await within_grace(clock, {task}, "memory promotion(s)", "facts lost") == 1
    task.cancel()
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith("stopping: 1 memory promotion(s) still running after the stop's")


async def test_a_flag_an_earlier_server_left_set_begins_no_stop() -> None:
    """``AppStatus.should_exit`` is process-wide and nothing resets it: a server started in a
    process where another one stopped (tests, an embedding) read it as its own stop at once,
    and each chat stream it served ended ``server_stopping`` a grace later."""
    AppStatus.should_exit = True  # an earlier server's stop
    clock = StopClock(grace=0.05)
    watcher = asyncio.create_task(watch_stop(clock))
    try:
        await asyncio.sleep(3 * POLL_SECONDS)
        assert clock.deadline is None and not stop_requested()
        AppStatus.should_exit = True  # this server's own stop
        await asyncio.wait_for(clock.ended(), timeout=1)
    finally:
        watcher.cancel()
        AppStatus.should_exit = False


def test_serve_gives_uvicorn_the_grace_and_the_time_to_store_as_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvicorn's own ``timeout_graceful_shutdown`` cancels what is no stream once the grace
    and ``STORE_SECONDS`` are over; without it such a request held ``serve``'s stop."""
    passed: dict[str, Any] = {}
    monkeypatch.setattr(cli_run, "create_app", lambda settings: object())
    monkeypatch.setattr(cli_run, "serve", lambda app, **kwargs: passed.update(kwargs) or 0)
    cli_run._serve(Settings(stop_grace_seconds=7.5))
    assert passed["timeout_graceful_shutdown"] == math.ceil(7.5 + STORE_SECONDS)
