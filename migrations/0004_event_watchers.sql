-- Announce an event only when some replica has a stream open on its session. Without this,
-- every request paid for three NOTIFYs (queue writes, a wake-up of every listening backend,
-- a JSON payload parsed by every replica) that nobody was waiting for.
--
-- Each replica keeps one row per session it streams (EventBus registers it before replaying
-- and refreshes it while the stream is open); a row whose replica died expires. UNLOGGED:
-- after a crash the table is empty and the replicas' next refresh fills it again, and open
-- streams catch up from the events table meanwhile (api/events.py).
CREATE UNLOGGED TABLE event_watchers (
    tenant      text        NOT NULL,
    session_id  text        NOT NULL,
    replica     uuid        NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, session_id, replica)
);

CREATE OR REPLACE FUNCTION cascade_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM event_watchers w WHERE w.tenant = NEW.tenant
               AND w.session_id = NEW.session_id AND w.expires_at > now()) THEN
        PERFORM pg_notify('cascade_events', json_build_object(
            't', NEW.tenant, 's', NEW.session_id, 'n', NEW.name, 'i', NEW.id,
            'd', CASE WHEN octet_length(NEW.data::text) > 7400 THEN NULL ELSE NEW.data END)::text);
    END IF;
    RETURN NULL;
END
$$;
