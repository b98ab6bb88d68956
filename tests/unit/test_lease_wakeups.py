"""LeaseWakeups: a waiter's pause ends at its poll delay or at its session's notification."""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest

from proxy.errors import ClientDisconnected
from proxy.services.client_watch import ClientWatch, pause
from proxy.services.lease_wakeups import LeaseWakeups, session_hash
from tests.unit.test_client_watch import Channel

MINE = session_hash("t", "s1")


def test_the_hash_is_the_databases() -> None:
    """Migration 0023 hashes the UTF-8 of tenant, NUL, id; neither may hold a NUL, so two
    keys that concatenate alike hash apart."""
    assert session_hash("t-ä", "s") == hashlib.sha256("t-ä\0s".encode()).hexdigest()
    assert session_hash("ab", "c") != session_hash("a", "bc")


def test_a_wait_nobody_wakes_lasts_its_delay() -> None:
    async def run() -> None:
        wakeups = LeaseWakeups()
        with wakeups.watch("t", "s1") as wake:
            wakeups.notified(session_hash("t", "other"))  # another session's
            started = time.monotonic()
            assert not await wake.wait(0.05)
            assert time.monotonic() - started >= 0.045

    asyncio.run(run())


def test_a_notification_ends_the_wait_at_once() -> None:
    async def run() -> None:
        wakeups = LeaseWakeups()
        with wakeups.watch("t", "s1") as wake, wakeups.watch("t", "s1") as other:
            asyncio.get_running_loop().call_later(0.02, wakeups.notified, MINE)
            started = time.monotonic()
            woken = await asyncio.gather(wake.wait(5), other.wait(5))
            assert woken == [True, True]  # every waiter on the session here
            assert time.monotonic() - started < 1

    asyncio.run(asyncio.wait_for(run(), 2))


def test_a_notification_between_two_waits_ends_the_next_one() -> None:
    """One that comes while the waiter tries (not pausing) is not lost: the try may have
    read the row just before the release."""

    async def run() -> None:
        wakeups = LeaseWakeups()
        with wakeups.watch("t", "s1") as wake:
            assert not await wake.wait(0.001)  # the first pause registers it
            wakeups.notified(MINE)  # during the next try
            assert await wake.wait(5)
            assert not await wake.wait(0.001)  # used up

    asyncio.run(asyncio.wait_for(run(), 2))


def test_only_waiters_are_registered() -> None:
    async def run() -> None:
        wakeups = LeaseWakeups()
        with wakeups.watch("t", "s1"):
            assert wakeups.waiting() == 0  # a request that never waits
        with wakeups.watch("t", "s1") as wake:
            await wake.wait(0)
            assert wakeups.waiting() == 1
        assert wakeups.waiting() == 0

    asyncio.run(run())


def test_pause_ends_at_the_notification_and_still_at_the_clients_leaving() -> None:
    async def run() -> None:
        wakeups = LeaseWakeups()
        channel = Channel()
        with ClientWatch(channel) as watch, wakeups.watch("t", "s1") as wake:
            asyncio.get_running_loop().call_later(0.02, wakeups.notified, MINE)
            started = time.monotonic()
            await pause(watch, 5, wake=wake)
            assert time.monotonic() - started < 1
            asyncio.get_running_loop().call_later(0.02, channel.leave)
            with pytest.raises(ClientDisconnected):
                await pause(watch, 5, wake=wake)

    asyncio.run(asyncio.wait_for(run(), 2))
