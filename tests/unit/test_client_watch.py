"""ClientWatch: a wait that the client's ``http.disconnect`` ends, with one listener."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.errors import ClientDisconnected
from proxy.services.client_watch import OPERATION_WAITING, WAITING, ClientWatch, pause
from proxy.services.session_locks import SessionLocks

KEY = ("tenant", "s1")


class Channel:
    """An ASGI ``receive`` whose body is read: it answers ``http.disconnect`` once ``leave``
    is called, and counts its callers."""

    def __init__(self) -> None:
        self.left = asyncio.Event()
        self.calls = 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        await self.left.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self.left.set()


def test_a_guarded_wait_ends_with_client_disconnected_when_the_client_leaves() -> None:
    async def run() -> None:
        channel = Channel()
        watch = ClientWatch(channel)
        asyncio.get_running_loop().call_later(0.02, channel.leave)
        with (
            pytest.raises(ClientDisconnected, match="went away while its request waited"),
            watch.guard(WAITING),
        ):
            await asyncio.sleep(5)
        assert watch.gone
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        await asyncio.sleep(0.01)  # the task goes on uncancelled

    asyncio.run(asyncio.wait_for(run(), 2))


def test_one_listener_serves_every_wait_and_none_is_started_without_a_wait() -> None:
    async def run() -> None:
        channel = Channel()
        with ClientWatch(channel):
            await asyncio.sleep(0.01)
        assert channel.calls == 0  # a request that never waits never listens
        with ClientWatch(channel) as watch:
            for _ in range(3):
                with watch.guard(WAITING):
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0)
            assert channel.calls == 1
            listener = watch._listener
        await asyncio.sleep(0)
        assert listener is not None and listener.cancelled()  # stopped on exit
        assert not watch.gone

    asyncio.run(run())


def test_a_client_gone_between_two_waits_is_found_at_the_next_and_nothing_else_is_cancelled() -> (
    None
):
    async def run() -> None:
        channel = Channel()
        watch = ClientWatch(channel)
        with watch.guard(WAITING):
            await asyncio.sleep(0.01)
        channel.leave()
        await asyncio.sleep(0.01)  # the client left outside any wait: this is not cut short
        with pytest.raises(ClientDisconnected):
            watch.check(WAITING)
        with pytest.raises(ClientDisconnected):
            await pause(watch, 5)

    asyncio.run(asyncio.wait_for(run(), 2))


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def run() -> None:
        channel = Channel()
        watch = ClientWatch(channel)

        async def wait() -> None:
            with watch.guard(WAITING):
                await asyncio.sleep(5)

        task = asyncio.create_task(wait())
        await asyncio.sleep(0.01)
        task.cancel()
        channel.leave()  # the client leaves as well: the outer cancellation still wins
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(run(), 2))


def test_a_channel_that_fails_tells_nothing() -> None:
    async def broken() -> dict[str, Any]:
        raise RuntimeError("no channel")

    async def run() -> None:
        watch = ClientWatch(broken)
        with watch.guard(WAITING):
            await asyncio.sleep(0.02)
        assert not watch.gone

    asyncio.run(run())


def test_a_queued_request_whose_client_leaves_leaves_the_queue() -> None:
    async def run() -> None:
        locks, channel = SessionLocks(), Channel()
        free = ClientWatch(Channel())
        await locks.acquire(KEY, free)  # a free session: taken at once, nothing watched
        assert free._listener is None
        watch = ClientWatch(channel)
        queued = asyncio.create_task(locks.acquire(KEY, watch))
        await asyncio.sleep(0.01)
        assert locks.waiting(KEY) == 2
        channel.leave()
        with pytest.raises(ClientDisconnected):
            await queued
        assert locks.waiting(KEY) == 1
        locks.release(KEY)
        assert locks.waiting(KEY) == 0
        await asyncio.wait_for(locks.acquire(KEY), 0.1)  # free again

    asyncio.run(asyncio.wait_for(run(), 2))


def test_an_operation_whose_client_leaves_in_the_queue_ends_before_its_block_and_says_so() -> None:
    async def run() -> None:
        locks, channel = SessionLocks(), Channel()
        await locks.acquire(KEY)  # a request holds the session
        ran = False

        async def operate() -> None:
            nonlocal ran
            async with locks.turn(KEY, ClientWatch(channel), OPERATION_WAITING):
                ran = True

        queued = asyncio.create_task(operate())
        await asyncio.sleep(0.01)
        assert locks.waiting(KEY) == 2
        channel.leave()
        with pytest.raises(ClientDisconnected, match="session operation waited"):
            await queued
        assert locks.waiting(KEY) == 1  # it left the queue
        locks.release(KEY)
        assert not ran

    asyncio.run(asyncio.wait_for(run(), 2))


def test_a_pause_names_what_was_not_done() -> None:
    async def run() -> None:
        channel = Channel()
        watch = ClientWatch(channel)
        asyncio.get_running_loop().call_later(0.02, channel.leave)
        with pytest.raises(ClientDisconnected, match="nothing was changed"):
            await pause(watch, 5, OPERATION_WAITING)

    asyncio.run(asyncio.wait_for(run(), 2))
