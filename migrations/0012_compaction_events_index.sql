-- Compaction events of a session, found without reading its other events.
--
-- A compaction persists context.compaction.started before it calls the fast model and its
-- partner (completed or failed) after; a process that dies in between leaves the started
-- event alone. The proxy closes such a compaction with a failed event (reason
-- `interrupted`) when it starts and when the session's next compaction starts
-- (services/compaction.py), so it looks for started events without a partner: at start-up
-- in every session, then in one session. The events table holds every request's events
-- (a context.usage per step), so both reads go through this index of the few compaction
-- rows instead of through events_session or a scan of the table.
CREATE INDEX events_compaction ON events (tenant, session_id, id)
    WHERE name IN ('context.compaction.started', 'context.compaction.completed',
                   'context.compaction.failed');
