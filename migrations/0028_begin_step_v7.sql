-- cascade_begin_step_v7: cascade_begin_step_v6 (migration 0021 as 0022 left it) with one more
-- argument, p_agents, the agents the request's proxy key may use (NULL: any). A limited key's
-- request checks the session's agent as it arrives (api/deps.py reach_session), but the step
-- starts later: after waiting for the session's lease, held by another request (this replica's
-- or another's), long enough for an unlimited key's request to move the session to an agent
-- the limited key may not use. v6 then wrote the waiting request's agent over it, and the
-- limited key read the other agent's history from then on. v7 decides on the row it locks and
-- updates: when p_agents is not NULL and the stored session's agent is not among them, the
-- step is refused, writing nothing (no rows, no agent or model, no lease; the owner's place
-- in the queue, if it had one, is given up, and the next waiter told when the lease is free)
-- and answering {"busy": false, "refused": agent}.
-- The two one-statement paths add the agent to their conditions, so a session the key may
-- use costs no extra statement, and one it may not use falls to the locked path, which
-- decides on the row as its lock reads it. A missing session is made for p_agent, as before
-- (the caller checked p_agent against the key).
--
-- cascade_begin_step_v6 stays, unchanged, so that a replica still on the previous code keeps
-- working while a rolling deploy replaces it; a later migration drops it once no replica
-- calls it.
CREATE OR REPLACE FUNCTION cascade_begin_step_v7(p_tenant text, p_id text, p_agent text,
                                                 p_model text, p_owner uuid, p_start integer,
                                                 p_start_hash text, p_head_len integer,
                                                 p_head_hash text, p_system_count integer,
                                                 p_ttl double precision, p_rows json,
                                                 p_bodies json[], p_spills json, p_events json,
                                                 p_agents text[])
RETURNS TABLE (session json, pos integer, hash text, role text, message json,
               tool_call_id text, tokens integer, redacted boolean, verbatim boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    s sessions%ROWTYPE;
    sm record;
    hit boolean;
    moved boolean := false;
    busy boolean := false;
    q record;
    mine integer;
BEGIN
    -- Every write below is the client's to resend, or a lease that is free again once it
    -- expires: none waits for a WAL flush (the request's last statement commits
    -- synchronously, which flushes these too).
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_start IS NOT NULL AND json_array_length(p_rows) > 0 THEN
        -- The common case, an extending request on the guessed head with a free lease (or
        -- this replica's own) and nobody waiting for it: take the lease, record the agent
        -- and model and move the head in one row update.
        UPDATE sessions x SET lease_owner = p_owner,
            lease_expires = clock_timestamp() + make_interval(secs => p_ttl),
            agent = p_agent, model = p_model, head_len = p_head_len, head_hash = p_head_hash,
            system_count = p_system_count, updated_at = now()
        WHERE x.tenant = p_tenant AND x.id = p_id
          AND (x.lease_owner IS NULL OR x.lease_owner = p_owner
               OR x.lease_expires < clock_timestamp())
          AND x.lease_queue IS NULL
          AND (p_agents IS NULL OR x.agent = ANY (p_agents))
          AND x.head_len = p_start AND x.head_hash IS NOT DISTINCT FROM p_start_hash
        RETURNING * INTO s;
        moved := FOUND;
    END IF;
    IF moved THEN
        s.head_len := p_start;
        s.head_hash := p_start_hash;
    ELSE
        -- Take the lease, and record a new agent or model, in one row update (nobody
        -- waiting, and a session the key may use; else the locked path below decides).
        UPDATE sessions x SET lease_owner = p_owner,
            lease_expires = clock_timestamp() + make_interval(secs => p_ttl),
            agent = p_agent, model = p_model,
            updated_at = CASE WHEN x.agent = p_agent AND x.model IS NOT DISTINCT FROM p_model
                              THEN x.updated_at ELSE now() END
        WHERE x.tenant = p_tenant AND x.id = p_id
          AND (x.lease_owner IS NULL OR x.lease_owner = p_owner
               OR x.lease_expires < clock_timestamp())
          AND x.lease_queue IS NULL
          AND (p_agents IS NULL OR x.agent = ANY (p_agents))
        RETURNING * INTO s;
        IF NOT FOUND THEN
            -- Held as this statement's snapshot saw it, or missing. Lock the row: if the
            -- holder's last statement is in flight this waits for it and reads the row it
            -- commits (free, the step stored) instead of answering busy.
            SELECT * INTO s FROM sessions x WHERE x.tenant = p_tenant AND x.id = p_id FOR UPDATE;
            IF FOUND AND p_agents IS NOT NULL AND (s.agent = ANY (p_agents)) IS NOT TRUE THEN
                -- Another agent's session, as the locked row says: refused, nothing written
                -- but this owner's place in the queue, which it gives up (the next waiter
                -- is told when the lease is free: migration 0023).
                mine := array_position(s.lease_queue, p_owner);
                IF mine IS NOT NULL THEN
                    s.lease_queue := s.lease_queue[:mine - 1] || s.lease_queue[mine + 1:];
                    s.lease_queue_expires := s.lease_queue_expires[:mine - 1]
                                             || s.lease_queue_expires[mine + 1:];
                    IF cardinality(s.lease_queue) = 0 THEN
                        s.lease_queue := NULL;
                        s.lease_queue_expires := NULL;
                    END IF;
                    UPDATE sessions x SET lease_queue = s.lease_queue,
                        lease_queue_expires = s.lease_queue_expires
                    WHERE x.tenant = p_tenant AND x.id = p_id;
                    IF s.lease_queue IS NOT NULL AND (s.lease_owner IS NULL
                                                      OR s.lease_expires < clock_timestamp())
                    THEN
                        PERFORM cascade_lease_freed_v1(p_tenant, p_id, s.lease_queue_expires);
                    END IF;
                END IF;
                RETURN QUERY SELECT json_build_object('busy', false, 'refused', s.agent),
                    NULL::integer, NULL::text, NULL::text, NULL::json, NULL::text,
                    NULL::integer, NULL::boolean, NULL::boolean;
                RETURN;
            ELSIF FOUND THEN
                -- Held by another owner, or free but another replica's waiter is ahead:
                -- busy, and this owner's place in the queue is kept (migration 0022).
                q := cascade_lease_queue_v1(p_owner, s.lease_owner, s.lease_expires,
                                            s.lease_queue, s.lease_queue_expires);
                IF NOT q.take THEN
                    busy := true;
                    UPDATE sessions x SET lease_queue = q.queue,
                        lease_queue_expires = q.expires
                    WHERE x.tenant = p_tenant AND x.id = p_id;
                ELSE
                    UPDATE sessions x SET lease_owner = p_owner,
                        lease_expires = clock_timestamp() + make_interval(secs => p_ttl),
                        lease_queue = q.queue, lease_queue_expires = q.expires,
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
    END IF;
    IF busy THEN
        RETURN QUERY SELECT json_build_object('busy', true),
            NULL::integer, NULL::text, NULL::text, NULL::json, NULL::text, NULL::integer,
            NULL::boolean, NULL::boolean;
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
        NULL::boolean, NULL::boolean;
    IF NOT hit THEN
        RETURN;
    END IF;
    PERFORM FROM cascade_append_v2(p_tenant, p_id, json_array_length(p_rows) > 0 AND NOT moved,
        p_head_len, p_head_hash, p_system_count, NULL, NULL, NULL, NULL,
        p_rows, p_bodies, NULL, p_spills, p_events);
    RETURN QUERY SELECT NULL::json, w.* FROM cascade_window_v1(p_tenant, p_id, p_system_count,
        greatest(coalesce(sm.boundary, 0), p_system_count), p_start) AS w;
END
$$;
