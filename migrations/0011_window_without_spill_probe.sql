-- The window read no longer probes tool_raw_outputs for every tool row.
--
-- Each row of the window carried `spilled`: whether its tool call had a stored raw output,
-- one index probe per tool message on every request. It told eviction which results it need
-- not copy before hiding them behind a placeholder; since migration 0008 an evicted result
-- keeps its body in its row and read_tool_output pages it from there, so eviction copies
-- nothing and the flag decided nothing. The column stays in the result type (always false),
-- so the signature is unchanged and the function is replaced in place: a replica still
-- running the code before this one reads `spilled` as false, which on that code only makes
-- copies it already drops. The store's other window reads (store/messages.py) drop it too.
CREATE OR REPLACE FUNCTION cascade_begin_step(
    p_tenant text, p_id text, p_agent text, p_model text, p_key bigint,
    p_start integer, p_start_hash text,   -- the guessed stored head; NULL: no guess
    p_head_len integer, p_head_hash text, p_system_count integer,
    r_pos integer[], r_hash text[], r_role text[], r_message json[], r_tool_call_id text[],
    r_tokens integer[], r_redacted boolean[], r_verbatim boolean[],
    x_id text[], x_content text[], x_bytes bigint[], x_capped boolean[],
    e_names text[], e_data jsonb[])
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
        NULL::boolean, NULL::boolean, NULL::boolean;
    IF NOT hit THEN
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
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
