"""The handoff nudge (DESIGN §5): say once when compaction no longer makes enough room.

When a session's occupancy stays at or above ``handoff.atFraction`` of the limit even after a
compaction, the agent (or its user) should hand the work to a fresh session. The shell calls
:func:`handoff_step` on every step, after any compaction the step ran, with the session's
crossing flag; it returns the new flag and, on the step that crosses, one transient
``context.handoff_suggested`` event with the numbers.

Once per crossing: the flag is set when the nudge is given and cleared only when occupancy
drops below ``atFraction`` again, so a session that stays high is nudged once, and one that
falls back (a later compaction, a reset) and climbs again is nudged again. The flag lives in
the session row (``sessions.handoff_above``): it survives restarts and is shared by replicas,
and the transient event itself is never stored, so it could not be derived from events.

"Even after a compaction" means: the window already carries a summary, and no compaction of
the session is running (one in flight may still make room; the step that sees its result
decides). A step that cannot decide leaves the flag as it is. A step with the nudge switched
off clears it: switched on again later, a session already high gets the nudge of a fresh
crossing, not the silence of one it was given long ago. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.cascade.pressure import Pressure
from proxy.cascade.types import HANDOFF_SUGGESTED, Event
from proxy.config_context import HandoffConfig

__all__ = ["HandoffStep", "handoff_step"]


@dataclass(frozen=True, slots=True)
class HandoffStep:
    """The session's crossing flag after this step, and the event to emit (or None)."""

    above: bool
    event: Event | None = None


def handoff_step(
    p: Pressure, cfg: HandoffConfig, *, above: bool, summarized: bool, compacting: bool
) -> HandoffStep:
    """Decide this step's nudge; ``above`` is the session's flag before the step."""
    if not cfg.enabled:
        return HandoffStep(False)
    if p.fraction < cfg.at_fraction:
        return HandoffStep(False)
    if above or not summarized or compacting:
        return HandoffStep(above)
    data = {
        "occupancy": p.occupancy,
        "limit": p.limit,
        "fraction": round(p.fraction, 4),
        "at_fraction": cfg.at_fraction,
    }
    return HandoffStep(True, Event(HANDOFF_SUGGESTED, data))
