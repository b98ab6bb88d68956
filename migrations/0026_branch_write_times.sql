-- A branch made before its copy kept write times gets its parent's back.
--
-- Branching stamped every row and spill it copied with the time of the branch, until the
-- copy kept when each was written (proxy/store/sessions.py COPY_SESSION). A read by bare tool
-- call id tells by those times whether the id's newest result is its spill or its row
-- (proxy/store/raw_outputs.py), so in such a branch a reused id (call_0 every turn) whose
-- newest result was kept whole read an older result's spill. Each branch, oldest first (a
-- branch of a branch then finds its parent's times restored), gives each row the copy
-- stamped (written at the branch's own creation, in the copy's transaction) the time of the
-- parent's row at its position with its hash written before the branch, and each such spill
-- the time of the parent's spill of its id with its text (the newest, or one it replaced).
-- A row or spill the parent no longer holds (deleted, reset) keeps the branch's time.
DO $$
DECLARE
    b record;
BEGIN
    FOR b IN
        SELECT tenant, id, parent_id, created_at FROM sessions
        WHERE parent_id IS NOT NULL ORDER BY created_at
    LOOP
        UPDATE messages m SET created_at = coalesce((
            SELECT max(p.created_at) FROM messages p
            WHERE p.tenant = b.tenant AND p.session_id = b.parent_id AND p.pos = m.pos
              AND p.hash = m.hash AND p.created_at < b.created_at), m.created_at)
        WHERE m.tenant = b.tenant AND m.session_id = b.id AND m.created_at = b.created_at;

        UPDATE tool_raw_outputs r SET created_at = coalesce((
            SELECT max(s.created_at) FROM (
                SELECT created_at, content FROM tool_raw_outputs
                WHERE tenant = b.tenant AND session_id = b.parent_id
                  AND tool_call_id = r.tool_call_id
                UNION ALL
                SELECT created_at, content FROM tool_raw_output_versions
                WHERE tenant = b.tenant AND session_id = b.parent_id
                  AND tool_call_id = r.tool_call_id
            ) s
            WHERE s.content = r.content AND s.created_at < b.created_at), r.created_at)
        WHERE r.tenant = b.tenant AND r.session_id = b.id AND r.created_at = b.created_at;
    END LOOP;
END
$$;
