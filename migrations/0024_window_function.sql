-- cascade_window_v1 where migration 0019's first text left none.
--
-- A database that ran 0019 as main first shipped it (commit 3dd961e) read the window inside
-- cascade_append_v1 and has no cascade_window_v1; 0019 was then edited to create it, and
-- 0020-0023 call it, so such a database failed every request's window read
-- (proxy/store/shipped.py accepts that first text as 0019 applied). This creates the
-- function with 0019's current body; on every other database it replaces it with the same
-- body, which changes nothing.
CREATE OR REPLACE FUNCTION cascade_window_v1(p_tenant text, p_id text, p_system_count integer,
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
