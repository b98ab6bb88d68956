-- cascade_begin_step takes four composite arguments and has a versioned name.
--
-- Its 24 positional parameters (ten scalars, then one array per column of the new rows, the
-- spilled outputs and the events) become one value per concept: the step, its new rows, their
-- spilled outputs and its events. The old function is dropped, not replaced: a function whose
-- arguments change is a new function, and a versioned name says so where it is called
-- (store/messages.py BEGIN_STEP). migrations/schema.sql shows the current definition.
CREATE TYPE cascade_step AS (
    tenant text, id text, agent text, model text, lock_key bigint,
    start integer, start_hash text,        -- the guessed stored head; NULL: no guess
    head_len integer, head_hash text, system_count integer);
CREATE TYPE cascade_new_message AS (
    pos integer, hash text, role text, message json, tool_call_id text, tokens integer,
    redacted boolean, verbatim boolean);
CREATE TYPE cascade_raw_output AS (
    tool_call_id text, content text, original_bytes bigint, capped boolean);
CREATE TYPE cascade_event AS (name text, data jsonb);

DROP FUNCTION cascade_begin_step(text, text, text, text, bigint, integer, text, integer, text,
    integer, integer[], text[], text[], json[], text[], integer[], boolean[], boolean[], text[],
    text[], bigint[], boolean[], text[], jsonb[]);

CREATE FUNCTION cascade_begin_step_v2(
    p cascade_step, p_rows cascade_new_message[], p_raw cascade_raw_output[],
    p_events cascade_event[])
RETURNS TABLE (session json, pos integer, hash text, role text, message json,
               tool_call_id text, tokens integer, redacted boolean, spilled boolean,
               verbatim boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    s sessions%ROWTYPE;
    sm record;
    hit boolean;
BEGIN
    PERFORM pg_advisory_lock(p.lock_key);
    LOOP  -- at most twice: read; if missing or changed, write and read again
        SELECT * INTO s FROM sessions x WHERE x.tenant = p.tenant AND x.id = p.id;
        EXIT WHEN FOUND AND s.agent = p.agent AND s.model IS NOT DISTINCT FROM p.model;
        PERFORM set_config('synchronous_commit', 'off', true);
        INSERT INTO sessions AS x (tenant, id, agent, model)
        VALUES (p.tenant, p.id, p.agent, p.model)
        ON CONFLICT (tenant, id) DO UPDATE SET updated_at = now(), model = EXCLUDED.model,
            agent = EXCLUDED.agent;
    END LOOP;
    SELECT m.version, m.boundary, m.content INTO sm FROM summaries m
    WHERE m.tenant = p.tenant AND m.session_id = p.id AND m.invalidated_at IS NULL
    ORDER BY m.version DESC LIMIT 1;
    hit := p.start IS NOT NULL AND s.head_len = p.start
           AND s.head_hash IS NOT DISTINCT FROM p.start_hash;
    RETURN QUERY SELECT (to_jsonb(s) || jsonb_build_object(
        'summary_version', sm.version, 'summary_boundary', sm.boundary,
        'summary_content', sm.content, 'appended', hit))::json,
        NULL::integer, NULL::text, NULL::text, NULL::json, NULL::text, NULL::integer,
        NULL::boolean, NULL::boolean, NULL::boolean;
    IF NOT hit THEN
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id, tokens,
                          redacted, verbatim)
    SELECT p.tenant, p.id, r.pos, r.hash, r.role, r.message, r.tool_call_id, r.tokens,
           r.redacted, r.verbatim
    FROM unnest(p_rows) AS r;
    IF cardinality(p_raw) > 0 THEN
        INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content,
                                      original_bytes, capped)
        SELECT p.tenant, p.id, x.tool_call_id, x.content, x.original_bytes, x.capped
        FROM unnest(p_raw) AS x
        ON CONFLICT (tenant, session_id, tool_call_id) DO NOTHING;
    END IF;
    IF cardinality(p_rows) > 0 THEN
        UPDATE sessions SET head_len = p.head_len, head_hash = p.head_hash,
            system_count = p.system_count, updated_at = now()
        WHERE tenant = p.tenant AND id = p.id;
    END IF;
    INSERT INTO events (tenant, session_id, name, data)
    SELECT p.tenant, p.id, e.name, e.data FROM unnest(p_events) WITH ORDINALITY AS e
    ORDER BY e.ordinality;
    -- the window's older rows: the leading system rows and the live rows after the summary,
    -- as two index ranges (one OR condition scans the whole history; see store/messages.py
    -- _window); the new rows are the caller's, and so is the body of every verbatim row
    RETURN QUERY
    SELECT * FROM (
        SELECT NULL::json, m.pos, m.hash, m.role,
               CASE WHEN m.verbatim THEN NULL ELSE coalesce(m.placeholder, m.message) END,
               m.tool_call_id, m.tokens, m.redacted, false, m.verbatim
        FROM messages m
        WHERE m.tenant = p.tenant AND m.session_id = p.id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < least(p.system_count, p.start)
        UNION ALL
        SELECT NULL::json, m.pos, m.hash, m.role,
               CASE WHEN m.verbatim THEN NULL ELSE coalesce(m.placeholder, m.message) END,
               m.tool_call_id, m.tokens, m.redacted, false, m.verbatim
        FROM messages m
        WHERE m.tenant = p.tenant AND m.session_id = p.id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < p.start
          AND m.pos >= greatest(coalesce(sm.boundary, 0), p.system_count)
    ) w ORDER BY 2;
END
$$;
