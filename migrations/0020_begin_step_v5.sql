-- cascade_begin_step_v5: cascade_begin_step_v4 with the head moved by the lease's own row
-- update. On an extending request whose guessed head matches (the common case), v4 updated
-- the sessions row twice: once to take the lease (and record the agent and model), then in
-- cascade_append_v1 to move the head. Every update writes a row version and its WAL, so v5
-- first tries the one UPDATE that takes the lease and moves the head, on the condition that
-- the stored head is the guessed one; cascade_append_v1 is then called with move_head false
-- and stays the one statement that inserts a client's messages. When that UPDATE matches
-- no row (a wrong guess, a held lease, a new session) v5 goes on as v4 did, and a wrong
-- guess pays one index probe more.
--
-- The head test is in the WHERE clause, so a row another transaction replaces while this
-- one waits on its lock is tested again as committed. An UPDATE returns the new row only
-- (PostgreSQL 16 has no RETURNING old): on a hit the caller is handed the row with its head
-- as it was (the guessed one, head_len and head_hash), its system_count and updated_at as
-- the step leaves them, which no caller reads. The arguments and the result are v4's.
DROP FUNCTION cascade_begin_step_v4(json, json, json[], json, json);

CREATE FUNCTION cascade_begin_step_v5(p_session json, p_rows json, p_bodies json[],
                                      p_spills json, p_events json)
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
    p_tenant text; p_id text; p_agent text; p_model text; p_owner uuid;
    p_start integer; p_start_hash text;
    p_head_len integer; p_head_hash text; p_system_count integer;
    p_ttl double precision;
BEGIN
    SELECT k.tenant, k.id, k.agent, k.model, k.owner, k.start, k.start_hash, k.head_len,
           k.head_hash, k.system_count, k.ttl
    INTO p_tenant, p_id, p_agent, p_model, p_owner, p_start, p_start_hash, p_head_len,
         p_head_hash, p_system_count, p_ttl
    FROM json_to_record(p_session) AS k(tenant text, id text, agent text, model text,
        owner uuid, start integer, start_hash text, head_len integer, head_hash text,
        system_count integer, ttl double precision);
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
    PERFORM FROM cascade_append_v1(
        json_build_object('tenant', p_tenant, 'id', p_id,
            'move_head', json_array_length(p_rows) > 0 AND NOT moved, 'head_len', p_head_len,
            'head_hash', p_head_hash, 'system_count', p_system_count),
        p_rows, p_bodies, NULL, p_spills, p_events);
    RETURN QUERY SELECT NULL::json, w.* FROM cascade_window_v1(p_tenant, p_id, p_system_count,
        greatest(coalesce(sm.boundary, 0), p_system_count), p_start) AS w;
END
$$;

-- Migration 0010's trigger, which moves a replaced raw output to tool_raw_output_versions,
-- ran its DELETE ... RETURNING and the INSERT of what it returned for every spill, though
-- nearly every spill is a new tool call id with nothing to replace. It now probes the key
-- first and returns at once when no row holds it: a new spill costs one index probe, and
-- the statement that moves a replaced output runs only when there is one. The trigger
-- keeps its name and calls the function by oid, so replacing the body is enough.
CREATE OR REPLACE FUNCTION cascade_keep_raw_output_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM FROM tool_raw_outputs o
    WHERE o.tenant = NEW.tenant AND o.session_id = NEW.session_id
      AND o.tool_call_id = NEW.tool_call_id;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
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
