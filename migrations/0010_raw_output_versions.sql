-- A tool call id can come back with another result: a client that edits a tool result and
-- resends the history, or a server that numbers its calls call_0, call_1 … afresh each turn.
-- tool_raw_outputs holds one row per (tenant, session, tool_call_id), and the spill of the
-- second result was dropped (ON CONFLICT DO NOTHING): read_tool_output and the tool-outputs
-- API served the first result's text for the live message's marker, and the middle of the
-- second result, cut at ingestion, was stored nowhere.
--
-- Now the newest result under an id is the one served, since the live message holds the
-- newest marker, and the one it replaces moves to tool_raw_output_versions: nothing stored is
-- lost. A trigger does it, so every statement that spills (cascade_begin_step, the append
-- and persist statements in store/messages.py) keeps its ON CONFLICT DO NOTHING, which now
-- only skips an identical copy. It fires for spills only (a few per session) and costs one
-- index probe when the id is new.
CREATE TABLE tool_raw_output_versions (
    tenant          text        NOT NULL,
    session_id      text        NOT NULL,
    tool_call_id    text        NOT NULL,
    content         text        NOT NULL,
    original_bytes  bigint      NOT NULL,
    capped          boolean     NOT NULL,
    created_at      timestamptz NOT NULL,
    replaced_at     timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);
CREATE INDEX tool_raw_output_versions_call
    ON tool_raw_output_versions (tenant, session_id, tool_call_id);

CREATE FUNCTION cascade_keep_raw_output_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH replaced AS (
        DELETE FROM tool_raw_outputs o
        WHERE o.tenant = NEW.tenant AND o.session_id = NEW.session_id
          AND o.tool_call_id = NEW.tool_call_id AND o.content IS DISTINCT FROM NEW.content
        RETURNING o.*
    )
    INSERT INTO tool_raw_output_versions (tenant, session_id, tool_call_id, content,
                                          original_bytes, capped, created_at)
    SELECT tenant, session_id, tool_call_id, content, original_bytes, capped, created_at
    FROM replaced;
    RETURN NEW;
END
$$;

CREATE TRIGGER raw_output_versions BEFORE INSERT ON tool_raw_outputs
    FOR EACH ROW EXECUTE FUNCTION cascade_keep_raw_output_version();
