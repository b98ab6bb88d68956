-- One round trip to start a request: take the session's advisory lock, then create the
-- session row (or update its agent/model when they changed) and read it with its latest
-- valid summary. A VOLATILE function takes a fresh snapshot for each statement it runs, so
-- what it reads includes everything committed before the lock was granted (one outer
-- statement would read with a snapshot taken before it waited). The lock is session-level:
-- it outlives this statement and is released by the request's last statement
-- (RECORD_STEP), or by the pool's reset if that never ran.
--
-- In the common case (the row exists, same agent and model) nothing is written, so the
-- statement commits without a WAL flush. When it does write, it commits asynchronously:
-- the row is re-created from the next request if a crash loses it, and the request's last
-- statement commits synchronously, which flushes this one too.
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
    LOOP  -- at most twice: read; if missing or changed, write and read again
        RETURN QUERY
        SELECT s.tenant, s.id, s.agent, s.model, s.head_len, s.head_hash, s.system_count,
               s.last_prompt_tokens, s.last_estimate, s.calibration, s.reclaimed_tokens,
               sm.version, sm.boundary, sm.content
        FROM sessions s LEFT JOIN LATERAL (
            SELECT m.version, m.boundary, m.content FROM summaries m
            WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.invalidated_at IS NULL
            ORDER BY m.version DESC LIMIT 1
        ) sm ON true
        WHERE s.tenant = p_tenant AND s.id = p_id AND s.agent = p_agent
          AND s.model IS NOT DISTINCT FROM p_model;
        EXIT WHEN FOUND;
        PERFORM set_config('synchronous_commit', 'off', true);
        INSERT INTO sessions AS x (tenant, id, agent, model)
        VALUES (p_tenant, p_id, p_agent, p_model)
        ON CONFLICT (tenant, id) DO UPDATE SET updated_at = now(), model = EXCLUDED.model,
            agent = EXCLUDED.agent;
    END LOOP;
END
$$;

-- The end of a request: release the session lock, but only once this transaction commits.
-- The transaction-level hold taken first (granted at once: this backend holds the lock) stays
-- until commit after the session-level hold is released, so the next request's
-- cascade_open_session() cannot read the session before this step is committed.
CREATE FUNCTION cascade_release_session(p_key bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_key);
    RETURN pg_advisory_unlock(p_key);
END
$$;
