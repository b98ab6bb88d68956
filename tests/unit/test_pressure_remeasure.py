"""A step over the hard threshold whose compactions another one's newer summary keeps
superseding (``services/pressure.py``): it measures at most ``_MEASURES`` times, compacts
once per measure still over, and goes on with the window reloaded after the last, for the
overflow guard to fit; one compaction that folds ends the measuring."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.cascade.pressure import CompactionNeed
from proxy.services import pressure
from proxy.services.compaction_span import CompactionResult


@dataclass
class _Summarizer:
    results: list[CompactionResult]
    jobs: list[Any] = field(default_factory=list)

    async def wait_inflight(self, tenant: str, session_id: str) -> None:
        return None

    async def compact_now(self, job: Any, guard: Any = None) -> CompactionResult:
        self.jobs.append(job)
        return self.results[min(len(self.jobs), len(self.results)) - 1]


class _Turn:
    conn = object()

    async def park(self) -> None:
        return None

    async def connect(self) -> None:
        return None


def _relieve(monkeypatch: pytest.MonkeyPatch, results: list[CompactionResult]) -> Any:
    loads: list[int] = []

    async def load_window(conn: Any, key: Any, state: Any, count: Any) -> Any:
        loads.append(len(loads))
        return SimpleNamespace(summary_version=len(loads), session={})

    monkeypatch.setattr(pressure, "load_window", load_window)
    monkeypatch.setattr(pressure.budgets, "pressure", lambda *a: None)
    monkeypatch.setattr(pressure, "compaction_need", lambda *a, **k: CompactionNeed("hard"))
    monkeypatch.setattr(pressure, "compaction_job", lambda *a: a[-1].summary_version)
    summarizer = _Summarizer(results)
    relief = pressure.PressureRelief(summarizer)  # type: ignore[arg-type]
    ctx = SimpleNamespace(tenant="t", session_id="s", key=("t", "s"), client=None, admit=None)
    rt = SimpleNamespace(agent="a", ctx=SimpleNamespace(summarize=None))
    state = SimpleNamespace(summary_version=None, session={})
    step = relief.maybe_compact(_Turn(), None, rt, {}, ctx, state, None, 0)  # type: ignore[arg-type]
    return step, summarizer, loads


async def test_a_window_that_stays_over_measures_three_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    superseded = CompactionResult(None, 0, 0, 0, 0, "newer", superseded=True)
    step, summarizer, loads = _relieve(monkeypatch, [superseded])
    state = await step
    assert summarizer.jobs == [1, 2, 3]  # each on the summary it measured
    assert len(loads) == 4 and state.summary_version == 4  # the window after the last


async def test_a_compaction_that_folds_ends_the_measuring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    superseded = CompactionResult(None, 0, 0, 0, 0, "newer", superseded=True)
    folded = CompactionResult(3, 10, 8, 900, 300)
    step, summarizer, loads = _relieve(monkeypatch, [superseded, folded])
    state = await step
    assert summarizer.jobs == [1, 2]
    assert len(loads) == 3 and state.summary_version == 3
