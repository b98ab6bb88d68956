-- What truncation and summarisation took out of a session's current history, kept on its row
-- beside eviction's reclaimed_tokens, so that all three describe the same history: a reset
-- zeroes them and a branch copies them (proxy/store/sessions.py), as it copies the rows they
-- were taken from. The session view read them from the session's events, which a reset
-- keeps and a branch does not copy, so after a reset they still counted the forgotten
-- history and a branch started them at 0.
--
-- The event that says what a stage reclaimed bumps the total as it is inserted, in the
-- statement that inserts it (the chat step's, the compaction's): a trigger, so that every
-- statement that persists such an event counts it and none sends a statement more. Only
-- those two events fire it. Truncation counts the characters a cut left out at four to a
-- token, each event rounded down, as the view summed them; a compaction what its completed
-- event says the prompt lost, when the session still holds its summary (a reset between the
-- summary's write and the event's took it, and with it what it reclaimed).
--
-- It can run again over its own effects (tests/integration/test_migrations.py re-applies
-- the migrations after 0023): the totals are added, and filled, only where they are missing.
CREATE OR REPLACE FUNCTION cascade_count_reclaimed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name = 'context.truncated' THEN
        UPDATE sessions SET reclaimed_truncation = reclaimed_truncation
            + greatest(coalesce((NEW.data->>'original_chars')::bigint, 0)
                       - coalesce((NEW.data->>'kept_chars')::bigint, 0), 0) / 4
        WHERE tenant = NEW.tenant AND id = NEW.session_id;
    ELSE
        UPDATE sessions SET reclaimed_summarisation = reclaimed_summarisation
            + greatest(coalesce((NEW.data->>'tokens_before')::bigint, 0)
                       - coalesce((NEW.data->>'tokens_after')::bigint, 0), 0)
        WHERE tenant = NEW.tenant AND id = NEW.session_id
          AND EXISTS (SELECT FROM summaries m WHERE m.tenant = NEW.tenant
                      AND m.session_id = NEW.session_id
                      AND m.version = (NEW.data->>'summary_version')::integer);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS events_reclaimed ON events;
CREATE TRIGGER events_reclaimed AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.name IN ('context.truncated', 'context.compaction.completed'))
    EXECUTE FUNCTION cascade_count_reclaimed();

-- Sessions stored before: their totals from their events, as the view counted them. Which
-- of those events came before a reset, and what a branch's parent had reclaimed when it was
-- made, the database does not record: those sessions keep the counts the view showed.
DO $$
BEGIN
    IF EXISTS (SELECT FROM information_schema.columns WHERE table_schema = current_schema()
               AND table_name = 'sessions' AND column_name = 'reclaimed_truncation') THEN
        RETURN;
    END IF;
    ALTER TABLE sessions
        ADD COLUMN reclaimed_truncation bigint NOT NULL DEFAULT 0,
        ADD COLUMN reclaimed_summarisation bigint NOT NULL DEFAULT 0;
    UPDATE sessions s SET reclaimed_truncation = e.truncation,
                          reclaimed_summarisation = e.summarisation
    FROM (
        SELECT tenant, session_id,
            coalesce(sum(greatest(coalesce((data->>'original_chars')::bigint, 0)
                                  - coalesce((data->>'kept_chars')::bigint, 0), 0) / 4)
                     FILTER (WHERE name = 'context.truncated'), 0) AS truncation,
            coalesce(sum(greatest(coalesce((data->>'tokens_before')::bigint, 0)
                                  - coalesce((data->>'tokens_after')::bigint, 0), 0))
                     FILTER (WHERE name = 'context.compaction.completed'), 0) AS summarisation
        FROM events
        WHERE name IN ('context.truncated', 'context.compaction.completed')
        GROUP BY tenant, session_id
    ) e
    WHERE s.tenant = e.tenant AND s.id = e.session_id;
END
$$;
