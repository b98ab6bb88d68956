-- The handoff nudge's crossing flag (proxy/cascade/handoff.py).
--
-- context.handoff_suggested is transient (never stored), so whether a session has already
-- been nudged for its current stay above handoff.atFraction cannot be read from events. The
-- flag is set on the step that emits the nudge and cleared on the first step below the
-- fraction again: once per crossing, across restarts and replicas. It is written only when
-- it flips, so most steps pay nothing for it.
ALTER TABLE sessions ADD COLUMN handoff_above boolean NOT NULL DEFAULT false;
