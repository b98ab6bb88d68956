-- The first statement of a request: take the session's advisory lock, create the session
-- row (or update its agent/model when they changed), read it with its latest valid summary,
-- and, when the caller guessed the stored head right, also store the request's new messages
-- (with their spilled raw outputs and events), move the head, and read the window's older
-- rows. A correct guess (the common case: this replica served the session's last request)
-- makes the whole pre-answer work one round trip; a wrong one writes nothing and returns
-- the session, and the caller plans and appends in a second statement.
--
-- A VOLATILE function takes a fresh snapshot for each statement it runs, so what it reads
-- includes everything committed before the lock was granted (one outer statement would read
-- with a snapshot taken before it waited). The lock is session-level: it outlives this
-- statement and is released by the request's last statement (RECORD_STEP, through
-- cascade_release_session below), or by the pool's reset if that never ran.
--
-- Nothing here waits for a WAL flush: in the common case the session row is only read, and
-- the messages are the client's own, which it resends; the request's last statement commits
-- synchronously, which flushes this one too.
CREATE FUNCTION cascade_begin_step(
    p_tenant text, p_id text, p_agent text, p_model text, p_key bigint,
    p_start integer, p_start_hash text,   -- the guessed stored head; NULL: no guess
    p_head_len integer, p_head_hash text, p_system_count integer,
    r_pos integer[], r_hash text[], r_role text[], r_message json[], r_tool_call_id text[],
    r_tokens integer[], r_redacted boolean[],
    x_id text[], x_content text[], x_bytes bigint[], x_capped boolean[],
    e_names text[], e_data jsonb[])
RETURNS TABLE (session json, pos integer, hash text, role text, message json,
               tool_call_id text, tokens integer, redacted boolean, spilled boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    s sessions%ROWTYPE;
    sm record;
    hit boolean;
BEGIN
    PERFORM pg_advisory_lock(p_key);
    LOOP  -- at most twice: read; if missing or changed, write and read again
        SELECT * INTO s FROM sessions x WHERE x.tenant = p_tenant AND x.id = p_id;
        EXIT WHEN FOUND AND s.agent = p_agent AND s.model IS NOT DISTINCT FROM p_model;
        PERFORM set_config('synchronous_commit', 'off', true);
        INSERT INTO sessions AS x (tenant, id, agent, model)
        VALUES (p_tenant, p_id, p_agent, p_model)
        ON CONFLICT (tenant, id) DO UPDATE SET updated_at = now(), model = EXCLUDED.model,
            agent = EXCLUDED.agent;
    END LOOP;
    SELECT m.version, m.boundary, m.content INTO sm FROM summaries m
    WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.invalidated_at IS NULL
    ORDER BY m.version DESC LIMIT 1;
    hit := p_start IS NOT NULL AND s.head_len = p_start
           AND s.head_hash IS NOT DISTINCT FROM p_start_hash;
    RETURN QUERY SELECT (to_jsonb(s) || jsonb_build_object(
        'summary_version', sm.version, 'summary_boundary', sm.boundary,
        'summary_content', sm.content, 'appended', hit))::json,
        NULL::integer, NULL::text, NULL::text, NULL::json, NULL::text, NULL::integer,
        NULL::boolean, NULL::boolean;
    IF NOT hit THEN
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id, tokens,
                          redacted)
    SELECT p_tenant, p_id, t.* FROM unnest(r_pos, r_hash, r_role, r_message, r_tool_call_id,
                                           r_tokens, r_redacted) AS t;
    INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content, original_bytes,
                                  capped)
    SELECT p_tenant, p_id, r.* FROM unnest(x_id, x_content, x_bytes, x_capped) AS r
    ON CONFLICT (tenant, session_id, tool_call_id) DO NOTHING;
    IF cardinality(r_pos) > 0 THEN
        UPDATE sessions SET head_len = p_head_len, head_hash = p_head_hash,
            system_count = p_system_count, updated_at = now()
        WHERE tenant = p_tenant AND id = p_id;
    END IF;
    INSERT INTO events (tenant, session_id, name, data)
    SELECT p_tenant, p_id, e.n, e.d FROM unnest(e_names, e_data) WITH ORDINALITY AS e(n, d, o)
    ORDER BY e.o;
    -- the window's older rows: the leading system rows and the live rows after the summary,
    -- as two index ranges (one OR condition scans the whole history; see store/messages.py
    -- _window); the new rows are the caller's
    RETURN QUERY
    SELECT * FROM (
        SELECT NULL::json, m.pos, m.hash, m.role, m.message, m.tool_call_id, m.tokens,
               m.redacted, m.tool_call_id IS NOT NULL AND EXISTS (
                   SELECT 1 FROM tool_raw_outputs r WHERE r.tenant = m.tenant
                     AND r.session_id = m.session_id AND r.tool_call_id = m.tool_call_id)
        FROM messages m
        WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < least(p_system_count, p_start)
        UNION ALL
        SELECT NULL::json, m.pos, m.hash, m.role, m.message, m.tool_call_id, m.tokens,
               m.redacted, m.tool_call_id IS NOT NULL AND EXISTS (
                   SELECT 1 FROM tool_raw_outputs r WHERE r.tenant = m.tenant
                     AND r.session_id = m.session_id AND r.tool_call_id = m.tool_call_id)
        FROM messages m
        WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < p_start
          AND m.pos >= greatest(coalesce(sm.boundary, 0), p_system_count)
    ) w ORDER BY 2;
END
$$;

-- The end of a request: release the session lock, but only once this transaction commits.
-- The transaction-level hold taken first (granted at once: this backend holds the lock) stays
-- until commit after the session-level hold is released, so the next request's
-- cascade_begin_step() cannot read the session before this step is committed.
CREATE FUNCTION cascade_release_session(p_key bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_key);
    RETURN pg_advisory_unlock(p_key);
END
$$;
