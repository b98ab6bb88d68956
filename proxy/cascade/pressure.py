"""When to compact: the soft/hard/overflow decision of durable summarisation (DESIGN §5.2).

The shell measures; this decides. At ``softFraction`` a compaction starts in the background
(or, with ``background`` off, runs now); at ``hardFraction``, or when the prompt would not
fit at all, the request first waits for the compaction already in flight, measures again,
and compacts now only if that one did not bring it under (``waited=True``).

After a failed compaction the session backs off (``compaction_backoff``): the soft threshold
starts no compaction until the backoff has passed (``backing_off``), while the hard
threshold, the overflow guard and a forced ``/compact`` still try.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from proxy.config_context import SummarizeConfig

__all__ = [
    "Pressure",
    "CompactionNeed",
    "compaction_need",
    "compaction_backoff",
    "backing_off",
    "BACKOFF_FIRST_SECONDS",
    "BACKOFF_MAX_SECONDS",
]


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


BACKOFF_FIRST_SECONDS = 30.0
BACKOFF_MAX_SECONDS = 600.0


def compaction_backoff(failures: int, retry_after: float | None = None) -> float:
    """Seconds the session's background compaction waits after its ``failures``-th failed
    compaction in a row: 30 s, doubled with each further failure up to 10 minutes, and no
    less than the fast model's own ``Retry-After`` (within the same cap). A failure that
    keeps failing (a briefing no smaller than what it replaces, a fast model that is down)
    would otherwise cost one summary call on every request over ``softFraction``."""
    base = BACKOFF_FIRST_SECONDS * float(2 ** min(max(failures - 1, 0), 10))
    return min(max(base, retry_after or 0.0), BACKOFF_MAX_SECONDS)


def backing_off(owner: object, expires: object, now: datetime) -> bool:
    """Whether a session row (its ``compaction_owner`` and ``compaction_expires``, a
    ``datetime`` or its ISO text as the row's JSON carries it) is in a failed compaction's
    backoff at ``now``: no owner, and an expiry still ahead."""
    if owner is not None or expires is None:
        return False
    when = expires if isinstance(expires, datetime) else datetime.fromisoformat(str(expires))
    return when > now
