"""``proxy.stopping``: the stop's clock, and the bounded wait for background work."""

from __future__ import annotations

import asyncio
import logging
import math
import signal
from typing import Any

import pytest
import uvicorn

from proxy import cli_run
from proxy.settings import Settings
from proxy.stopping import (
    POLL_SECONDS,
    STORE_SECONDS,
    StopClock,
    serving,
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


class _Serving(uvicorn.Server):
    """A server whose ``serve`` runs until told, its app's lifespan state holding ``clock``."""

    def __init__(self, clock: StopClock) -> None:
        super().__init__(uvicorn.Config(app=lambda scope, receive, send: None))
        self.lifespan: Any = type("Lifespan", (), {"state": {"stop": clock}})()
        self.done = asyncio.Event()

    async def serve(self, sockets: Any = None) -> None:
        await self.done.wait()


async def test_an_apps_stop_is_its_own_servers_alone() -> None:
    """Two servers on one loop (two in one process, each on its own loop, alike): one's
    stop begins its app's clock, not the other's, where sse-starlette's one flag for the
    process (``AppStatus.should_exit``) began both."""
    ours, theirs = StopClock(grace=5), StopClock(grace=5)
    here, there = _Serving(ours), _Serving(theirs)
    tasks = [asyncio.create_task(s.serve()) for s in (here, there)]
    watchers = [asyncio.create_task(watch_stop(c)) for c in (ours, theirs)]
    try:
        await asyncio.sleep(0)
        assert serving(ours) is here and serving(theirs) is there
        assert serving(StopClock()) is None  # no server's app
        there.handle_exit(signal.SIGTERM, None)
        await asyncio.wait_for(watchers[1], timeout=1)
        await asyncio.sleep(3 * POLL_SECONDS)
        assert theirs.deadline is not None and ours.deadline is None
    finally:
        for server in (here, there):
            server.done.set()
        for task in [*tasks, *watchers]:
            task.cancel()


async def test_the_search_for_the_apps_server_ends_where_none_will_come() -> None:
    """The search reads every task's coroutine frames, which costs as tasks grow (each open
    stream's): under another ASGI server or a test client, or with every uvicorn server on
    the loop serving another app already, the watch ends rather than search every poll for
    the life of the process. A server whose lifespan has yet to start serving is waited for."""
    clock = StopClock(grace=5)
    await asyncio.wait_for(watch_stop(clock), timeout=1)  # no uvicorn server on the loop
    other = _Serving(StopClock())
    other.started = True  # serving another app
    starting = _Serving(StopClock())
    starting.lifespan.state = {}  # its app's lifespan still starting
    tasks = [asyncio.create_task(s.serve()) for s in (other, starting)]
    try:
        await asyncio.sleep(0)
        watcher = asyncio.create_task(watch_stop(clock))
        await asyncio.sleep(3 * POLL_SECONDS)
        assert not watcher.done()  # a server on the loop may yet serve its app
        starting.lifespan.state = {"stop": clock}
        starting.should_exit = True
        await asyncio.wait_for(watcher, timeout=1)
        assert clock.deadline is not None
        starting.started = True  # now both serve another app than this one's
        await asyncio.wait_for(watch_stop(StopClock()), timeout=1)
    finally:
        for server in (other, starting):
            server.done.set()
        await asyncio.gather(*tasks)


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
