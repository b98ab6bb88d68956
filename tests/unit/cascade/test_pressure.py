"""compaction_need: the soft/hard/overflow decision, a pure table."""

from __future__ import annotations

import pytest

from proxy.cascade.pressure import CompactionNeed, Pressure, compaction_need
from proxy.config_context import SummarizeConfig

CFG = SummarizeConfig()  # soft 0.6, hard 0.9


def measure(fraction: float, *, overflowing: bool = False) -> Pressure:
    return Pressure(
        occupancy=int(fraction * 1000), estimate=2000 if overflowing else 0, limit=1000, room=1000
    )


@pytest.mark.parametrize(
    ("fraction", "overflowing", "waited", "trigger"),
    [
        (0.5, False, False, None),
        (0.6, False, False, "soft"),
        (0.89, False, False, "soft"),
        (0.9, False, False, "hard"),
        (0.1, True, False, "overflow"),
        (0.95, True, False, "overflow"),
        # after waiting for the compaction in flight, a soft one is not started again
        (0.7, False, True, None),
        (0.9, False, True, "hard"),
        (0.1, True, True, "overflow"),
    ],
)
def test_the_need_follows_the_thresholds(
    fraction: float, overflowing: bool, waited: bool, trigger: str | None
) -> None:
    need = compaction_need(measure(fraction, overflowing=overflowing), CFG, waited=waited)
    assert need == (None if trigger is None else CompactionNeed(trigger))


def test_hard_and_overflow_wait_for_the_compaction_in_flight_first() -> None:
    assert not CompactionNeed("soft").wait_first
    assert CompactionNeed("hard").wait_first and CompactionNeed("overflow").wait_first


def test_summarising_off_never_compacts() -> None:
    off = SummarizeConfig(enabled=False)
    assert compaction_need(measure(1.0, overflowing=True), off) is None
