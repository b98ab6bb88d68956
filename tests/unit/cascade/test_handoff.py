"""The handoff nudge's decision: once per crossing, only after a compaction."""

from __future__ import annotations

from proxy.cascade.handoff import handoff_step
from proxy.cascade.pressure import Pressure
from proxy.cascade.types import HANDOFF_SUGGESTED
from proxy.config_context import HandoffConfig

ON = HandoffConfig(enabled=True, at_fraction=0.8)


def _p(occupancy: int, limit: int = 1000) -> Pressure:
    return Pressure(occupancy=occupancy, estimate=occupancy, limit=limit, room=limit)


def test_crossing_after_a_compaction_emits_the_numbers() -> None:
    out = handoff_step(_p(850), ON, above=False, summarized=True, compacting=False)
    assert out.above is True and out.event is not None
    assert out.event.name == HANDOFF_SUGGESTED
    assert out.event.data == {"occupancy": 850, "limit": 1000, "fraction": 0.85, "at_fraction": 0.8}


def test_exactly_at_the_fraction_counts() -> None:
    assert handoff_step(_p(800), ON, above=False, summarized=True, compacting=False).event


def test_once_per_crossing() -> None:
    again = handoff_step(_p(900), ON, above=True, summarized=True, compacting=False)
    assert again.above is True and again.event is None
    below = handoff_step(_p(500), ON, above=True, summarized=True, compacting=False)
    assert below.above is False and below.event is None
    assert (
        handoff_step(_p(900), ON, above=below.above, summarized=True, compacting=False).event
        is not None
    )


def test_no_nudge_before_a_compaction_or_while_one_runs() -> None:
    for summarized, compacting in ((False, False), (True, True)):
        out = handoff_step(_p(950), ON, above=False, summarized=summarized, compacting=compacting)
        assert out.above is False and out.event is None


def test_off_by_default_leaves_the_flag() -> None:
    assert HandoffConfig().enabled is False
    out = handoff_step(_p(990), HandoffConfig(), above=False, summarized=True, compacting=False)
    assert out.above is False and out.event is None


def test_switched_off_the_flag_clears_and_switched_on_again_a_high_session_is_nudged() -> None:
    off = handoff_step(_p(990), HandoffConfig(), above=True, summarized=True, compacting=False)
    assert off.above is False and off.event is None
    again = handoff_step(_p(990), ON, above=off.above, summarized=True, compacting=False)
    assert again.above is True and again.event is not None
