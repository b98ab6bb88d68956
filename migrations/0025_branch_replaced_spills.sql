-- A branch made before its copy took the replaced spills gets them from its parent.
--
-- Branching copied tool_raw_outputs only, the newest spill under each tool call id, until
-- the copy took tool_raw_output_versions too (proxy/store/sessions.py COPY_SESSION). In a
-- branch made before, an older result cut under a reused id (call_0 every turn) has no spill
-- of its own: its whole text is only in the parent's versions, the sent form
-- (?form=sent, the console's resend) has nothing to rebuild it from, and deleting the parent
-- loses it. Each branch, oldest first (a branch of a branch then finds its parent's copied),
-- takes the parent's versions replaced by the time it was made, the ones the copy missed;
-- a version it already holds (the same id and write time) is not copied twice, so a branch
-- made since the fix gains nothing. A parent since deleted or reset has nothing to give.
DO $$
DECLARE
    b record;
BEGIN
    FOR b IN
        SELECT tenant, id, parent_id, created_at FROM sessions
        WHERE parent_id IS NOT NULL ORDER BY created_at
    LOOP
        INSERT INTO tool_raw_output_versions (tenant, session_id, tool_call_id, content,
            original_bytes, capped, created_at, replaced_at)
        SELECT v.tenant, b.id, v.tool_call_id, v.content, v.original_bytes, v.capped,
               v.created_at, v.replaced_at
        FROM tool_raw_output_versions v
        WHERE v.tenant = b.tenant AND v.session_id = b.parent_id
          AND v.replaced_at <= b.created_at
          AND NOT EXISTS (
              SELECT 1 FROM tool_raw_output_versions w
              WHERE w.tenant = b.tenant AND w.session_id = b.id
                AND w.tool_call_id = v.tool_call_id AND w.created_at = v.created_at);
    END LOOP;
END
$$;
