-- cascade_append_v1: the one statement text that stores a client's new messages (issue 20,
-- "one write path"). Three paths stored them before, each its own INSERT: the common case
-- inside cascade_begin_step_v3 (the guessed head matched), an append after a wrong or no
-- guess or a divergence (store/messages.py APPEND_AND_FETCH_WINDOW), and a new session's
-- held-back first messages written with their first step (APPEND_STEP). All three now call
-- this function; cascade_begin_step_v4 replaces v3 and calls it on a hit.
--
-- In one call it stores the rows (a row evicted by the step it arrives with goes in already
-- evicted: its placeholder beside the body, evicted_at set; a trimmed one with trimmed_at),
-- their spilled raw outputs, moves the head (adding the tokens the step's eviction
-- reclaimed), inserts the events (the table's trigger NOTIFYs them), sends the transient
-- NOTIFY payloads, and returns the window's older rows when asked (cascade_window_v1, which
-- cascade_begin_step_v4 reads the same way).
--
-- p_step:   {tenant, id, move_head, head_len, head_hash, system_count, reclaimed,
--            start, from, notify}
--           move_head false: the head, system_count and reclaimed stay as they are;
--           start NULL: no window is read; else the window's older rows are the leading
--           system rows below least(system_count, start) and the live rows in [from, start);
--           notify: the transient payloads, a json array of strings, or NULL
-- p_rows:   [{pos, hash, role, tool_call_id, tokens, redacted, verbatim, trim}, ...]
-- p_bodies: the rows' messages, one json each, in the order of p_rows
-- p_placeholders: the rows' placeholders (NULL for a row not evicted) in the same order, or
--           NULL when none is evicted
-- p_spills: [{tool_call_id, content, original_bytes, capped}, ...] or NULL
-- p_events: [{name, data}, ...] or NULL
--
-- The NUL rules of migration 0018 hold: bodies and placeholders travel beside the documents
-- as json[] (a json function refuses a document with "\u0000" in it); every string inside a
-- document is already escaped (nul.encode / nul.encode_json; a transient payload is ASCII
-- JSON text, so a NUL in it is the six characters of an escape, which the document quotes).
--
-- It commits asynchronously (synchronous_commit off for the transaction): everything it
-- writes is the client's to resend, and the request's last statement (record_step) commits
-- synchronously, which flushes this too.
-- cascade_window_v1: the window's older rows a step reads beside its append: the leading
-- system rows below least(system_count, start) and the live rows in [from, start), as two
-- index ranges (one OR condition scans the whole history; see store/messages.py _window).
-- The new rows (from start on) are the caller's, and so is the body of every verbatim row.
-- LANGUAGE sql and STABLE, so the planner inlines it into the statement that calls it: a
-- PL/pgSQL function's set is materialised, and copying a window of rows twice costs as much
-- as the rest of the call (a few per cent of it).
CREATE FUNCTION cascade_window_v1(p_tenant text, p_id text, p_system_count integer,
                                  p_from integer, p_start integer)
RETURNS TABLE (pos integer, hash text, role text, message json, tool_call_id text,
               tokens integer, redacted boolean, verbatim boolean)
LANGUAGE sql STABLE AS $$
    SELECT * FROM (
        SELECT m.pos, m.hash, m.role,
               CASE WHEN m.verbatim THEN NULL ELSE coalesce(m.placeholder, m.message) END,
               m.tool_call_id, m.tokens, m.redacted, m.verbatim
        FROM messages m
        WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < least(p_system_count, p_start)
        UNION ALL
        SELECT m.pos, m.hash, m.role,
               CASE WHEN m.verbatim THEN NULL ELSE coalesce(m.placeholder, m.message) END,
               m.tool_call_id, m.tokens, m.redacted, m.verbatim
        FROM messages m
        WHERE m.tenant = p_tenant AND m.session_id = p_id AND m.superseded_at IS NULL
          AND m.trimmed_at IS NULL AND m.pos < p_start AND m.pos >= p_from
    ) w ORDER BY 1
$$;

CREATE FUNCTION cascade_append_v1(p_step json, p_rows json, p_bodies json[],
                                  p_placeholders json[], p_spills json, p_events json)
RETURNS TABLE (pos integer, hash text, role text, message json, tool_call_id text,
               tokens integer, redacted boolean, verbatim boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    p_tenant text; p_id text; p_move boolean; p_head_len integer; p_head_hash text;
    p_system_count integer; p_reclaimed integer; p_start integer; p_from integer;
    p_notify json;
BEGIN
    SELECT k.tenant, k.id, k.move_head, k.head_len, k.head_hash, k.system_count, k.reclaimed,
           k.start, k."from", k.notify
    INTO p_tenant, p_id, p_move, p_head_len, p_head_hash, p_system_count, p_reclaimed,
         p_start, p_from, p_notify
    FROM json_to_record(p_step) AS k(tenant text, id text, move_head boolean,
        head_len integer, head_hash text, system_count integer, reclaimed integer,
        start integer, "from" integer, notify json);
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

-- cascade_begin_step_v4: cascade_begin_step_v3 with its append (the INSERTs of the rows,
-- spills and events, the head move) handed to cascade_append_v1 and its window read to
-- cascade_window_v1 (inlined into the RETURN QUERY: no second copy of the window). The
-- arguments are v3's; the result drops v3's always-false "spilled" column.
DROP FUNCTION cascade_begin_step_v3(json, json, json[], json, json);

CREATE FUNCTION cascade_begin_step_v4(p_session json, p_rows json, p_bodies json[],
                                      p_spills json, p_events json)
RETURNS TABLE (session json, pos integer, hash text, role text, message json,
               tool_call_id text, tokens integer, redacted boolean, verbatim boolean)
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
            'move_head', json_array_length(p_rows) > 0, 'head_len', p_head_len,
            'head_hash', p_head_hash, 'system_count', p_system_count),
        p_rows, p_bodies, NULL, p_spills, p_events);
    RETURN QUERY SELECT NULL::json, w.* FROM cascade_window_v1(p_tenant, p_id, p_system_count,
        greatest(coalesce(sm.boundary, 0), p_system_count), p_start) AS w;
END
$$;
