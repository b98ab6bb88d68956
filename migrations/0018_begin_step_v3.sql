-- cascade_begin_step_v3 replaces cascade_begin_step_v2 with the same body and five arguments
-- instead of 25 positional ones (issue 20, "one write path"): the session's scalars as one json
-- object; the new rows, the spilled raw outputs and the events each as one json array of
-- objects, expanded inside by json_to_record / json_to_recordset; and the rows' bodies as a
-- json[] beside them, in the same order. A call names what it passes by key, so adding a
-- field is a new key, not a new position every caller must count to.
--
-- The bodies stay out of the json documents: PostgreSQL's json functions (json_to_recordset,
-- even json_array_elements) refuse a document that holds "\u0000" anywhere, and a client's
-- message may hold one. A json[] element is only validated, never expanded, and is stored as
-- the client's text, byte for byte. Every other string in the documents is already escaped
-- (nul.encode: role, tool_call_id, model, a raw output's content; nul.encode_json: an event's
-- data, which becomes jsonb as before).
--
-- json, not jsonb: jsonb refuses "\u0000" too, and reorders keys. Not composite types either:
-- asyncpg introspects a composite parameter type on every new connection, a round trip that
-- a new session on a fresh connection pays (and that hung after a lost connection,
-- tests/integration/api/test_database_loss.py).
--
-- p_session: {tenant, id, agent, model, owner, start, start_hash, head_len, head_hash,
--             system_count, ttl}   (start/start_hash NULL: no guess of the stored head;
--             ttl: the lease's time to live, in seconds)
-- p_rows:    [{pos, hash, role, tool_call_id, tokens, redacted, verbatim}, ...]
-- p_bodies:  the rows' messages, one json each, in the order of p_rows
-- p_spills:  [{tool_call_id, content, original_bytes, capped}, ...] or NULL
-- p_events:  [{name, data}, ...] or NULL
-- It returns what cascade_begin_step_v2 returned (migration 0016 explains the lease).
DROP FUNCTION cascade_begin_step_v2(text, text, text, text, uuid, integer, text, integer, text,
    integer, integer[], text[], text[], json[], text[], integer[], boolean[], boolean[], text[],
    text[], bigint[], boolean[], text[], jsonb[], double precision);

CREATE FUNCTION cascade_begin_step_v3(p_session json, p_rows json, p_bodies json[],
                                      p_spills json, p_events json)
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
    SELECT p_tenant, p_id, t.pos, t.hash, t.role, t.message, t.tool_call_id, t.tokens,
           t.redacted, t.verbatim
    FROM ROWS FROM (json_to_recordset(p_rows) AS (pos integer, hash text, role text,
                        tool_call_id text, tokens integer, redacted boolean, verbatim boolean),
                    unnest(p_bodies))
        AS t(pos, hash, role, tool_call_id, tokens, redacted, verbatim, message);
    IF json_array_length(p_spills) > 0 THEN
        INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content,
                                      original_bytes, capped)
        SELECT p_tenant, p_id, r.* FROM json_to_recordset(p_spills)
            AS r(tool_call_id text, content text, original_bytes bigint, capped boolean)
        ON CONFLICT (tenant, session_id, tool_call_id) DO NOTHING;
    END IF;
    IF json_array_length(p_rows) > 0 THEN
        UPDATE sessions SET head_len = p_head_len, head_hash = p_head_hash,
            system_count = p_system_count, updated_at = now()
        WHERE tenant = p_tenant AND id = p_id;
    END IF;
    INSERT INTO events (tenant, session_id, name, data)
    SELECT p_tenant, p_id, e.n, e.d
    FROM ROWS FROM (json_to_recordset(p_events) AS (name text, data jsonb)) WITH ORDINALITY
        AS e(n, d, o)
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
