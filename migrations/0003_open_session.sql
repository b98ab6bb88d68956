-- One round trip to start a request: take the session's advisory lock, then create or touch
-- the session row and read its latest valid summary. A VOLATILE function takes a fresh
-- snapshot for each statement it runs, so the RETURN QUERY below sees everything committed
-- before the lock was granted (one outer statement would read with a snapshot taken before
-- it waited). The lock is session-level: it outlives this statement and is released by the
-- request's last statement (RECORD_STEP), or by the pool's reset if that never ran.
CREATE FUNCTION cascade_open_session(p_tenant text, p_id text, p_agent text, p_model text,
                                     p_key bigint)
RETURNS TABLE (tenant text, id text, agent text, model text, head_len integer,
               head_hash text, system_count integer, last_prompt_tokens integer,
               last_estimate integer, calibration double precision, reclaimed_tokens bigint,
               summary_version integer, summary_boundary integer, summary_content text)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_lock(p_key);
    RETURN QUERY
    WITH s AS (
        INSERT INTO sessions AS x (tenant, id, agent, model)
        VALUES (p_tenant, p_id, p_agent, p_model)
        ON CONFLICT (tenant, id) DO UPDATE SET updated_at = now(), model = EXCLUDED.model,
            agent = EXCLUDED.agent
        RETURNING x.*
    )
    SELECT s.tenant, s.id, s.agent, s.model, s.head_len, s.head_hash, s.system_count,
           s.last_prompt_tokens, s.last_estimate, s.calibration, s.reclaimed_tokens,
           sm.version, sm.boundary, sm.content
    FROM s LEFT JOIN LATERAL (
        SELECT m.version, m.boundary, m.content FROM summaries m
        WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.invalidated_at IS NULL
        ORDER BY m.version DESC LIMIT 1
    ) sm ON true;
END
$$;
