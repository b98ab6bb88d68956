-- A session's requests are serialised by a lease on its row, not by an advisory lock.
--
-- The advisory lock cascade_begin_step took was session-level: it lived on the connection of
-- the request holding it, so a chat request held a pooled connection from its first statement
-- until its reply was stored, provider call included, and Cascade could not run behind a
-- transaction-mode pooler (issue 24). A lease is two columns on the session row: whoever holds
-- it (lease_owner: the replica that runs the request, or one session-API operation) and until
-- when (lease_expires, the database's clock). The request's first statement takes it when it
-- is free, its own replica's or expired; its last statement (RECORD_STEP) clears it in the
-- transaction that stores the reply, so the next request reads the committed step. While an
-- answer streams the holder's replica renews it (services/leases.py); a replica that dies
-- stops renewing, and the session is free once the lease expires.
--
-- compaction_owner/compaction_expires are the same for a compaction (one per session across
-- replicas): a claim taken and released by short statements, renewed while the fast model
-- answers.
--
-- cascade_begin_step_v2 replaces cascade_begin_step (p_key gives way to p_owner, and p_ttl is
-- added last): a new name, so that a replica still running the code before this one fails
-- loudly instead of serialising by a lock no other replica takes. When the lease is held by
-- another owner it writes nothing and returns the session row with "busy" true; the caller
-- gives its connection back and tries again shortly.
ALTER TABLE sessions ADD COLUMN lease_owner uuid, ADD COLUMN lease_expires timestamptz,
    ADD COLUMN compaction_owner uuid, ADD COLUMN compaction_expires timestamptz;

DROP FUNCTION cascade_begin_step(text, text, text, text, bigint, integer, text, integer, text,
    integer, integer[], text[], text[], json[], text[], integer[], boolean[], boolean[], text[],
    text[], bigint[], boolean[], text[], jsonb[]);
DROP FUNCTION cascade_release_session(bigint);

CREATE FUNCTION cascade_begin_step_v2(
    p_tenant text, p_id text, p_agent text, p_model text, p_owner uuid,
    p_start integer, p_start_hash text,   -- the guessed stored head; NULL: no guess
    p_head_len integer, p_head_hash text, p_system_count integer,
    r_pos integer[], r_hash text[], r_role text[], r_message json[], r_tool_call_id text[],
    r_tokens integer[], r_redacted boolean[], r_verbatim boolean[],
    x_id text[], x_content text[], x_bytes bigint[], x_capped boolean[],
    e_names text[], e_data jsonb[],
    p_ttl double precision)  -- the lease's time to live, in seconds
RETURNS TABLE (session json, pos integer, hash text, role text, message json,
               tool_call_id text, tokens integer, redacted boolean, spilled boolean,
               verbatim boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    s sessions%ROWTYPE;
    sm record;
    hit boolean;
    busy boolean := false;
BEGIN
    -- Every write below is the client's to resend, or a lease that is free again once it
    -- expires: none waits for a WAL flush (the request's last statement commits
    -- synchronously, which flushes these too).
    PERFORM set_config('synchronous_commit', 'off', true);
    -- Take the lease, and record a new agent or model, in one row update: the common case,
    -- a free lease (or this replica's own), is this one statement.
    UPDATE sessions x SET lease_owner = p_owner,
        lease_expires = clock_timestamp() + make_interval(secs => p_ttl),
        agent = p_agent, model = p_model,
        updated_at = CASE WHEN x.agent = p_agent AND x.model IS NOT DISTINCT FROM p_model
                          THEN x.updated_at ELSE now() END
    WHERE x.tenant = p_tenant AND x.id = p_id
      AND (x.lease_owner IS NULL OR x.lease_owner = p_owner
           OR x.lease_expires < clock_timestamp())
    RETURNING * INTO s;
    IF NOT FOUND THEN
        -- Held as this statement's snapshot saw it, or missing. Lock the row: if the
        -- holder's last statement is in flight this waits for it and reads the row it
        -- commits (free, the step stored) instead of answering busy.
        SELECT * INTO s FROM sessions x WHERE x.tenant = p_tenant AND x.id = p_id FOR UPDATE;
        IF FOUND THEN
            IF s.lease_owner IS NOT NULL AND s.lease_owner <> p_owner
               AND s.lease_expires >= clock_timestamp() THEN
                busy := true;
            ELSE
                UPDATE sessions x SET lease_owner = p_owner,
                    lease_expires = clock_timestamp() + make_interval(secs => p_ttl),
                    agent = p_agent, model = p_model,
                    updated_at = CASE WHEN x.agent = p_agent
                                      AND x.model IS NOT DISTINCT FROM p_model
                                      THEN x.updated_at ELSE now() END
                WHERE x.tenant = p_tenant AND x.id = p_id
                RETURNING * INTO s;
            END IF;
        ELSE  -- a new session; a first request on it from elsewhere may have just made it
            INSERT INTO sessions AS x (tenant, id, agent, model, lease_owner, lease_expires)
            VALUES (p_tenant, p_id, p_agent, p_model, p_owner,
                    clock_timestamp() + make_interval(secs => p_ttl))
            ON CONFLICT (tenant, id) DO NOTHING
            RETURNING * INTO s;
            busy := NOT FOUND;
        END IF;
    END IF;
    IF busy THEN
        RETURN QUERY SELECT json_build_object('busy', true),
            NULL::integer, NULL::text, NULL::text, NULL::json, NULL::text, NULL::integer,
            NULL::boolean, NULL::boolean, NULL::boolean;
        RETURN;
    END IF;
    SELECT m.version, m.boundary, m.content INTO sm FROM summaries m
    WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.invalidated_at IS NULL
    ORDER BY m.version DESC LIMIT 1;
    hit := p_start IS NOT NULL AND s.head_len = p_start
           AND s.head_hash IS NOT DISTINCT FROM p_start_hash;
    RETURN QUERY SELECT (to_jsonb(s) || jsonb_build_object(
        'summary_version', sm.version, 'summary_boundary', sm.boundary,
        'summary_content', sm.content, 'appended', hit, 'busy', false))::json,
        NULL::integer, NULL::text, NULL::text, NULL::json, NULL::text, NULL::integer,
        NULL::boolean, NULL::boolean, NULL::boolean;
    IF NOT hit THEN
        RETURN;
    END IF;
    INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id, tokens,
                          redacted, verbatim)
    SELECT p_tenant, p_id, t.* FROM unnest(r_pos, r_hash, r_role, r_message, r_tool_call_id,
                                           r_tokens, r_redacted, r_verbatim) AS t;
    IF cardinality(x_id) > 0 THEN
        INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content,
                                      original_bytes, capped)
        SELECT p_tenant, p_id, r.* FROM unnest(x_id, x_content, x_bytes, x_capped) AS r
        ON CONFLICT (tenant, session_id, tool_call_id) DO NOTHING;
    END IF;
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
    -- _window); the new rows are the caller's, and so is the body of every verbatim row
    RETURN QUERY
    SELECT * FROM (
        SELECT NULL::json, m.pos, m.hash, m.role,
               CASE WHEN m.verbatim THEN NULL ELSE coalesce(m.placeholder, m.message) END,
               m.tool_call_id, m.tokens,
               m.redacted, false,
               m.verbatim
        FROM messages m
        WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < least(p_system_count, p_start)
        UNION ALL
        SELECT NULL::json, m.pos, m.hash, m.role,
               CASE WHEN m.verbatim THEN NULL ELSE coalesce(m.placeholder, m.message) END,
               m.tool_call_id, m.tokens,
               m.redacted, false,
               m.verbatim
        FROM messages m
        WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < p_start
          AND m.pos >= greatest(coalesce(sm.boundary, 0), p_system_count)
    ) w ORDER BY 2;
END
$$;
