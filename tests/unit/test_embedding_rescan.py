"""The embedding worker's rescan comes round under steady traffic too.

Ids committed out of order land below the cursor, as do the messages of a session moved
to an agent with retrieval on; only the rescan from the first message reads them. A poll
that reads to the table's end while new messages keep arriving must count as the end.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.services import retrieval
from tests.unit.rescan_harness import rescan_worker


async def test_a_poll_that_reads_to_the_end_under_traffic_starts_the_rescan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    polls: list[int] = []
    released: list[object] = []

    async def claim(conn: Any, *, after_id: int, **_: Any) -> Any:
        polls.append(after_id)
        # one new message past the cursor each poll, and the window reaches the table's end
        return [], after_id + 1, True

    async def release_stale(conn: Any) -> int:
        released.append(conn)
        return 0

    worker = rescan_worker(monkeypatch, claim, release_stale=release_stale, rescan_seconds=0.0)
    for _ in range(3):
        await worker.run_once()
    assert released, "no rescan while messages keep arriving"
    # each poll reached the end, so the rescan read from the first message all the same,
    # between the cursor's polls: 0 (the cursor), 0 (the rescan), 1 (the cursor), ...
    assert polls[:4] == [0, 0, 1, 0]


async def test_the_rescan_at_the_end_waits_for_the_batch_being_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The release of stale claims is for a dead replica's: this replica's batch still being
    stored (its claims as old as its embedding call) is stored before the rescan starts."""
    stored, released_after = asyncio.Event(), []

    async def claim(conn: Any, *, after_id: int, **_: Any) -> Any:
        return [retrieval.store.Claimed(after_id + 1, {"role": "user", "content": "x"})], 9, True

    async def update(conn: Any, **_: Any) -> None:
        await asyncio.sleep(0.05)
        stored.set()

    async def release_stale(conn: Any) -> int:
        released_after.append(stored.is_set())
        return 0

    worker = rescan_worker(
        monkeypatch, claim, release_stale=release_stale, update=update, rescan_seconds=0.0
    )
    await worker.run_once()
    await worker.flush()
    assert released_after == [True], "stale claims released while this replica stored its batch"
