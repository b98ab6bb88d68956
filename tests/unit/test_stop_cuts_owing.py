"""A stop's end of the compactions (``DurableSummarizer._end_all``) makes due at once every
promotion it cuts, the one a background compaction owes after its summary's insert too: a
compaction that stored its summary while the promotions' cut awaited what it cancelled was
cancelled after it, its session left owing the span until ``OWED_SECONDS`` had passed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.services import promotion_owed
from proxy.services.compaction import DurableSummarizer
from proxy.services.promotion_owed import Promotions
from proxy.store import summaries


class _Closer:
    async def aclose(self) -> None:
        pass

    async def after_stop(self, cut: Any, running: Any = None) -> None:
        pass


async def test_a_compaction_past_its_insert_during_the_cut_is_made_due_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    due: set[tuple[str, str]] = set()
    owing: set[tuple[str, str]] = set()

    @contextlib.asynccontextmanager
    async def borrowed(*args: Any) -> AsyncIterator[None]:
        yield None

    async def due_now(conn: Any, keys: Any) -> None:
        due.update(keys)

    monkeypatch.setattr(promotion_owed, "borrowed", borrowed)
    monkeypatch.setattr(summaries, "due_now", due_now)
    promotions = Promotions(None, None, None, 1.0)  # type: ignore[arg-type]

    async def promoting() -> None:  # a promotion that takes a moment to end once cancelled
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.shield(asyncio.sleep(0.05))

    async def compacting(inserting: float, key: tuple[str, str]) -> None:
        await asyncio.sleep(inserting)  # its summary's insert
        task = asyncio.current_task()
        with promotions.owing(task, key):
            owing.add(key)
            await asyncio.Event().wait()

    summarizer = object.__new__(DurableSummarizer)
    summarizer._closer = _Closer()  # type: ignore[assignment]
    summarizer._promotions = promotions
    summarizer._held = set()  # none holds its claim: these fakes never claim
    promotion = asyncio.create_task(promoting())
    promotions._tasks[promotion] = ("t", "promoting")
    late, owes = ("t", "inserting"), ("t", "owing")  # the first's insert answers during
    summarizer._tasks = {  # the moment the promotion takes to end
        late: asyncio.create_task(compacting(0.01, late)),
        owes: asyncio.create_task(compacting(0, owes)),
    }
    await asyncio.sleep(0.001)
    assert owing == {owes}
    await summarizer._end_all()
    assert {("t", "promoting"), owes} <= due
    assert owing <= due
