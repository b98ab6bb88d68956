"""The embedding worker's rescan reads a bounded number of rows per interval, whatever the
size of ``messages``: it resumes where the last interval's stopped instead of walking the
whole table back to back, and new messages are polled between its windows."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.services import retrieval
from proxy.store.embeddings import CLAIM_WINDOW
from tests.unit.rescan_harness import rescan_worker


class _Table:
    """``messages`` as the claim sees it: ids 1..top, every one embedded, one new message
    arriving with each poll (steady traffic); counts the rows each claim reads."""

    def __init__(self, top: int) -> None:
        self.top, self.read, self.starts = top, 0, []

    async def claim(self, conn: Any, *, after_id: int, **_: Any) -> Any:
        self.top += 1
        self.starts.append(after_id)
        first = after_id + 1
        if first > self.top:
            return [], None, True
        end = min(self.top, first + CLAIM_WINDOW - 1)
        self.read += end - first + 1
        return [], end, self.top < first + CLAIM_WINDOW


async def _rows_per_interval(monkeypatch: pytest.MonkeyPatch, size: int) -> list[int]:
    table, now = _Table(size), [0.0]
    worker = rescan_worker(monkeypatch, table.claim, clock=now)
    for _ in range(size // CLAIM_WINDOW + 5):  # the backfill: the whole table once
        await worker.run_once()
    per_interval = []
    for _ in range(3):
        now[0] += 60.0
        table.read = 0
        for _ in range(2 * size // CLAIM_WINDOW + 50):  # polls one interval holds (1 s idle)
            await worker.run_once()
        per_interval.append(table.read)
    return per_interval


async def test_rows_a_rescan_interval_reads_do_not_grow_with_the_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = await _rows_per_interval(monkeypatch, 20 * CLAIM_WINDOW)
    large = await _rows_per_interval(monkeypatch, 400 * CLAIM_WINDOW)
    bound = (retrieval.RESCAN_WINDOWS + 2) * CLAIM_WINDOW
    assert max(large) <= bound, (small, large)
    assert min(small) >= 20 * CLAIM_WINDOW  # a table the bound covers is rescanned whole


async def test_the_rescan_resumes_where_the_last_interval_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table, now = _Table(400 * CLAIM_WINDOW), [0.0]
    worker = rescan_worker(monkeypatch, table.claim, clock=now)
    for _ in range(405):
        await worker.run_once()
    lowest = []
    for _ in range(2):
        now[0] += 60.0
        table.starts.clear()
        for _ in range(3 * retrieval.RESCAN_WINDOWS):
            await worker.run_once()
        lowest.append(min(s for s in table.starts))
    assert lowest[0] == 0 and lowest[1] >= retrieval.RESCAN_WINDOWS * CLAIM_WINDOW - 1
