"""When to compact: the soft/hard/overflow decision of durable summarisation (DESIGN §5.2).

The shell measures; this decides. At ``softFraction`` a compaction starts in the background
(or, with ``background`` off, runs now); at ``hardFraction``, or when the prompt would not
fit at all, the request first waits for the compaction already in flight, measures again,
and compacts now only if that one did not bring it under (``waited=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.config_context import SummarizeConfig

__all__ = ["Pressure", "CompactionNeed", "compaction_need"]


@dataclass(frozen=True, slots=True)
class Pressure:
    """A window's measure: its occupancy (calibrated, with the fixed tools) and the raw
    estimate of the prompt against the room the budget leaves for it."""

    occupancy: int
    estimate: int
    limit: int
    room: int

    @property
    def fraction(self) -> float:
        return self.occupancy / self.limit if self.limit else 0.0

    @property
    def overflowing(self) -> bool:
        return self.estimate > self.room


@dataclass(frozen=True, slots=True)
class CompactionNeed:
    """What the shell must do: ``trigger`` is ``soft``, ``hard`` or ``overflow``."""

    trigger: str

    @property
    def wait_first(self) -> bool:
        """Hard and overflowing steps wait for the compaction in flight, then measure again."""
        return self.trigger != "soft"


def compaction_need(
    p: Pressure, cfg: SummarizeConfig, *, waited: bool = False
) -> CompactionNeed | None:
    """The compaction this step needs, or None. After the wait (``waited``) only a step
    still over ``hardFraction`` or still overflowing needs one; a soft one is not started
    again."""
    if not cfg.enabled:
        return None
    if p.overflowing:
        return CompactionNeed("overflow")
    if p.fraction >= cfg.hard_fraction:
        return CompactionNeed("hard")
    if not waited and p.fraction >= cfg.soft_fraction:
        return CompactionNeed("soft")
    return None
