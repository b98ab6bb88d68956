-- Every persisted event is announced on the 'cascade_events' channel by the database itself,
-- so a request can insert its events inside statements it already runs (no extra round trip
-- for NOTIFY). Payloads near NOTIFY's 8000-byte limit carry only the id; listeners read the
-- row back. Notifications are delivered at commit, in insertion order.
CREATE FUNCTION cascade_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cascade_events', json_build_object(
        't', NEW.tenant, 's', NEW.session_id, 'n', NEW.name, 'i', NEW.id,
        'd', CASE WHEN octet_length(NEW.data::text) > 7400 THEN NULL ELSE NEW.data END)::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION cascade_notify_event();
