"""The rescan's bound is on the windows it reads for nothing: messages it finds to embed
below the cursor (a session moved to an agent with retrieval on, a dead replica's released
claims) are embedded within the interval that found them, as the walk they replace did."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.services import retrieval
from proxy.store.embeddings import CLAIM_WINDOW
from tests.unit.rescan_harness import nothing, rescan_worker


class _Table:
    """``messages`` ids 1..top as ``store.CLAIM`` reads them: ``todo`` the ids with no row for
    the model, ``lo..hi`` the ids deleted (a session's messages, or retention's; none until a
    test sets them); a claim's first id and window skip the deleted ones and it takes the first
    ``limit`` of its window and moves on, as the SQL does."""

    def __init__(self, top: int) -> None:
        self.top, self.todo, self.windows = top, set(range(1, top + 1)), 0
        self.lo, self.hi = 1, 0  # nothing deleted yet

    async def claim(self, conn: Any, *, after_id: int, limit: int, **_: Any) -> Any:
        top = self.top if self.top > self.hi else min(self.top, self.lo - 1)
        first = after_id + 1 if after_id + 1 < self.lo else max(after_id + 1, self.hi + 1)
        if first > top:
            return [], None, True
        self.windows += 1
        scan: range | list[int] = range(first, min(top, first + CLAIM_WINDOW - 1) + 1)
        if first <= self.hi and self.lo <= scan[-1]:  # the window reaches deleted ids
            scan = [i for i in scan if not self.lo <= i <= self.hi]
        cand = [i for i in scan if i in self.todo][:limit]
        self.todo.difference_update(cand)
        if len(cand) >= limit:
            last = cand[-1]
        elif top >= first + CLAIM_WINDOW:
            last = first + CLAIM_WINDOW - 1
        else:
            last = scan[-1]
        at_end = len(cand) < limit and top < first + CLAIM_WINDOW
        claimed = [retrieval.store.Claimed(i, {"role": "user", "content": "x"}) for i in cand]
        return claimed, last, at_end


async def test_what_the_rescan_finds_below_the_cursor_is_embedded_within_one_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table, now = _Table(20 * CLAIM_WINDOW), [0.0]

    worker = rescan_worker(monkeypatch, table.claim, update=nothing, clock=now)
    while await worker.run_once():  # the backfill
        pass
    assert not table.todo
    moved = set(range(1, 20 * CLAIM_WINDOW, 4))  # a long session's messages, now to embed
    table.todo |= moved
    now[0] += 60.0
    table.windows = 0
    while await worker.run_once():  # the interval's polls, back to back while busy
        pass
    await worker.flush()
    left = len(table.todo)
    assert left == 0, f"{left} of {len(moved)} left for later intervals"
    # the windows it read for nothing stay within the bound
    batches = -(-len(moved) // 16)
    assert table.windows <= batches + retrieval.RESCAN_WINDOWS + 2


@pytest.mark.parametrize("windows", [20, 150])
async def test_a_dead_replicas_claims_below_the_cursor_wait_at_most_two_passes(
    monkeypatch: pytest.MonkeyPatch, windows: int
) -> None:
    """Released once stale at an interval's start, they are embedded when the walk next
    passes them: within two passes of the table, whether it fits one interval or not."""
    table, now = _Table(windows * CLAIM_WINDOW), [0.0]
    dead: dict[int, float] = {}  # id: when the dead replica claimed it

    async def release_stale(conn: Any) -> int:
        stale = [i for i, t in dead.items() if now[0] - t >= 60.0]
        for i in stale:
            del dead[i]
        table.todo.update(stale)
        return len(stale)

    worker = rescan_worker(
        monkeypatch, table.claim, release_stale=release_stale, update=nothing, clock=now
    )
    while await worker.run_once():
        pass
    now[0] += 90.0  # the walk is under way, somewhere in the table
    while await worker.run_once():
        pass
    ids = range(10, 10 + 16 * 5)  # a batch's claims near the first message, behind the walk
    dead.update(dict.fromkeys(ids, now[0]))
    passes = -(-windows // retrieval.RESCAN_WINDOWS)
    intervals = 0
    while (dead or table.todo) and intervals < 2 * passes + 1:
        now[0] += 60.0
        intervals += 1
        while await worker.run_once():
            pass
    assert not dead and not table.todo, f"still waiting after {intervals} intervals"


async def test_a_table_that_shrinks_past_the_rescans_cursor_is_rescanned_from_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    size = 150 * CLAIM_WINDOW
    table, now = _Table(size), [0.0]

    worker = rescan_worker(monkeypatch, table.claim, update=nothing, clock=now)
    while await worker.run_once():
        pass
    now[0] += 60.0
    while await worker.run_once():  # the walk stops a hundred windows in
        pass
    assert (worker._rescan or 0) > 30 * CLAIM_WINDOW  # where the next interval resumes
    table.lo, table.hi = 30 * CLAIM_WINDOW + 1, size  # all past 30 windows deleted
    table.todo |= set(range(5, 100))  # and a session below moved to retrieval
    table.top = size + 10  # new messages keep the sequence's ids
    table.todo |= set(range(size + 1, size + 11))
    await worker.run_once()
    assert not table.todo & set(range(size + 1, size + 11)), "new messages wait"
    for _ in range(2):
        now[0] += 60.0
        while await worker.run_once():
            pass
    await worker.flush()
    assert not table.todo
