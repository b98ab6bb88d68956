"""``answer_budget.RoomWait``: the one bound of a summary's and a promotion's waits for the
budget's room (``compaction_job._call``, ``promotion._asked``). One no request waits on has
none but its caller's own; one a request waits on ends ``WAIT_SECONDS`` after its first wait,
however many waits follow."""

from __future__ import annotations

import asyncio

import pytest

from proxy import answer_budget
from proxy.answer_budget import WAIT_SECONDS, RoomWait


async def test_a_wait_no_request_waits_on_has_no_bound() -> None:
    room = RoomWait()
    async with room.bound() as first:
        assert first.when() is None
    async with room.bound() as second:
        assert second.when() is None
    assert room.by is None


async def test_a_waited_on_one_sets_its_deadline_at_the_first_wait_and_shares_it() -> None:
    loop = asyncio.get_running_loop()
    room = RoomWait(waited_on=True)
    assert room.by is None  # nothing waited yet: no deadline runs
    before = loop.time()
    async with room.bound() as first:
        await asyncio.sleep(0.02)
    assert room.by is not None
    assert before + WAIT_SECONDS <= room.by <= loop.time() + WAIT_SECONDS
    async with room.bound() as later:  # later waits: the same deadline, not a new one
        assert later.when() == first.when() == room.by


async def test_a_later_wait_past_the_deadline_ends_at_once() -> None:
    room = RoomWait(waited_on=True)
    room.by = asyncio.get_running_loop().time()  # the first wait's WAIT_SECONDS have run
    try:
        async with room.bound():
            await asyncio.sleep(1.0)
    except TimeoutError:
        return
    raise AssertionError("a wait past the deadline was not bounded")


async def test_a_request_joining_a_running_wait_bounds_it_from_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request that joins a background compaction waits on it: the wait running then
    ends ``WAIT_SECONDS`` after the join, not at the summary's ``timeoutSeconds``."""
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 0.05)
    room, entered = RoomWait(), asyncio.Event()

    async def waiting() -> None:
        async with room.bound():
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(waiting())
    await entered.wait()
    loop = asyncio.get_running_loop()
    room.join()
    assert room.by is not None and room.by <= loop.time() + 0.05
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(task, 2)


async def test_a_request_joining_between_waits_bounds_the_next_from_its_start() -> None:
    room = RoomWait()
    async with room.bound():
        pass
    room.join()
    assert room.by is None  # no wait runs: the next one sets it, as a first wait would
    before = asyncio.get_running_loop().time()
    async with room.bound() as later:
        assert later.when() == room.by and room.by is not None
    assert room.by >= before + answer_budget.WAIT_SECONDS
    room.join()  # waited on already: its bound stays
    assert room.by == later.when()
