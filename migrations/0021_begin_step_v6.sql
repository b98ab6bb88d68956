-- cascade_begin_step_v6 and cascade_append_v2: v5 and v1 with their scalars as typed
-- arguments instead of one json object each. v5 parsed its json key with json_to_record (a
-- statement of its own inside the function), then built another json object for
-- cascade_append_v1, which parsed it again with a second json_to_record; each is an executor
-- run and a JSON parse per request. The bodies are otherwise v5's and v1's: the same
-- statements in the same order, the same results, and cascade_append_v2 is the one statement
-- text that inserts a client's messages (store/messages.py APPEND and begin_step v6 call it).
--
-- cascade_begin_step_v5 and cascade_append_v1 stay, unchanged, so that a replica still on
-- the previous code keeps working while a rolling deploy replaces it; a later migration drops
-- them once no replica calls them.
--
-- cascade_append_v2's arguments, in order (p_step's keys in v1):
--   p_tenant, p_id;
--   p_move: false leaves the head, system_count and reclaimed as they are;
--   p_head_len, p_head_hash, p_system_count, p_reclaimed: the head move;
--   p_start, p_from: p_start NULL reads no window; else the window's older rows are the
--          leading system rows below least(system_count, start) and the live rows in
--          [from, start);
--   p_notify: the transient payloads, a json array of strings, or NULL;
--   p_rows, p_bodies, p_placeholders, p_spills, p_events: as in cascade_append_v1
--          (migration 0019, which also states the NUL rules and why it commits
--          asynchronously).
--
-- cascade_begin_step_v6's arguments are v5's p_session keys, in order (tenant, id, agent,
-- model, owner, start, start_hash, head_len, head_hash, system_count, ttl), then v5's
-- p_rows, p_bodies, p_spills and p_events; its result is v5's.
CREATE FUNCTION cascade_append_v2(p_tenant text, p_id text, p_move boolean,
                                  p_head_len integer, p_head_hash text,
                                  p_system_count integer, p_reclaimed integer,
                                  p_start integer, p_from integer, p_notify json,
                                  p_rows json, p_bodies json[], p_placeholders json[],
                                  p_spills json, p_events json)
RETURNS TABLE (pos integer, hash text, role text, message json, tool_call_id text,
               tokens integer, redacted boolean, verbatim boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF json_array_length(p_rows) > 0 THEN
        INSERT INTO messages (tenant, session_id, pos, hash, role, message, tool_call_id,
                              tokens, redacted, verbatim, placeholder, evicted_at, trimmed_at)
        SELECT p_tenant, p_id, t.pos, t.hash, t.role, t.message, t.tool_call_id, t.tokens,
               t.redacted, t.verbatim, t.placeholder,
               CASE WHEN t.placeholder IS NOT NULL THEN now() END,
               CASE WHEN t.trim THEN now() END
        FROM ROWS FROM (json_to_recordset(p_rows) AS (pos integer, hash text, role text,
                            tool_call_id text, tokens integer, redacted boolean,
                            verbatim boolean, trim boolean),
                        unnest(p_bodies), unnest(p_placeholders))
            AS t(pos, hash, role, tool_call_id, tokens, redacted, verbatim, trim, message,
                 placeholder);
    END IF;
    IF json_array_length(p_spills) > 0 THEN
        -- an identical row is left as is; another text under the same id replaces it, and
        -- migration 0010's trigger moves the one replaced to tool_raw_output_versions
        INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content,
                                      original_bytes, capped)
        SELECT p_tenant, p_id, r.* FROM json_to_recordset(p_spills)
            AS r(tool_call_id text, content text, original_bytes bigint, capped boolean)
        ON CONFLICT (tenant, session_id, tool_call_id) DO NOTHING;
    END IF;
    IF p_move THEN
        UPDATE sessions SET head_len = p_head_len, head_hash = p_head_hash,
            system_count = p_system_count,
            reclaimed_tokens = reclaimed_tokens + coalesce(p_reclaimed, 0), updated_at = now()
        WHERE tenant = p_tenant AND id = p_id;
    END IF;
    IF json_array_length(p_notify) > 0 THEN
        PERFORM pg_notify('cascade_events', n) FROM json_array_elements_text(p_notify) AS n;
    END IF;
    IF json_array_length(p_events) > 0 THEN
        INSERT INTO events (tenant, session_id, name, data)
        SELECT p_tenant, p_id, e.n, e.d
        FROM ROWS FROM (json_to_recordset(p_events) AS (name text, data jsonb))
            WITH ORDINALITY AS e(n, d, o)
        ORDER BY e.o;
    END IF;
    IF p_start IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM cascade_window_v1(p_tenant, p_id, p_system_count, p_from,
                                                 p_start);
END
$$;

CREATE FUNCTION cascade_begin_step_v6(p_tenant text, p_id text, p_agent text, p_model text,
                                      p_owner uuid, p_start integer, p_start_hash text,
                                      p_head_len integer, p_head_hash text,
                                      p_system_count integer, p_ttl double precision,
                                      p_rows json, p_bodies json[], p_spills json,
                                      p_events json)
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
BEGIN
    -- Every write below is the client's to resend, or a lease that is free again once it
    -- expires: none waits for a WAL flush (the request's last statement commits
    -- synchronously, which flushes these too).
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_start IS NOT NULL AND json_array_length(p_rows) > 0 THEN
        -- The common case, an extending request on the guessed head with a free lease (or
        -- this replica's own): take the lease, record the agent and model and move the
        -- head in one row update.
        UPDATE sessions x SET lease_owner = p_owner,
            lease_expires = clock_timestamp() + make_interval(secs => p_ttl),
            agent = p_agent, model = p_model, head_len = p_head_len, head_hash = p_head_hash,
            system_count = p_system_count, updated_at = now()
        WHERE x.tenant = p_tenant AND x.id = p_id
          AND (x.lease_owner IS NULL OR x.lease_owner = p_owner
               OR x.lease_expires < clock_timestamp())
          AND x.head_len = p_start AND x.head_hash IS NOT DISTINCT FROM p_start_hash
        RETURNING * INTO s;
        moved := FOUND;
    END IF;
    IF moved THEN
        s.head_len := p_start;
        s.head_hash := p_start_hash;
    ELSE
        -- Take the lease, and record a new agent or model, in one row update.
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
