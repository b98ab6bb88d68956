-- cascade_related_v2: cascade_related (migration 0017) with a row the current summary folds
-- labelled `summarised` whatever happened to it before, as `/messages` and the console label
-- it. cascade_related called a result evicted and folded since `evicted`, for its
-- placeholder; that placeholder is in no prompt either, the summary stands for it. A row
-- after the boundary is `trimmed` or `evicted` as before, and a trimmed row stays `trimmed`
-- (the overflow guard dropped it for good, and no summary reads a trimmed row).
-- It also says whether the row's result is cleared (`cleared`: evicted, its placeholder sent in
-- its place): a compaction that lands while a turn's search runs folds rows that turn's prompt
-- still carries, which the search's caller drops as no message outside the prompt, but of a
-- cleared one the prompt carries only the placeholder, and the hit stays.
--
-- cascade_related stays, unchanged, so that a replica still on the previous code keeps
-- working while a rolling deploy replaces it; a later migration drops it once no replica
-- calls it.
CREATE OR REPLACE FUNCTION cascade_related_v2(
    p_tenant text, p_session text, p_model text, p_query vector, p_min double precision,
    p_limit integer
) RETURNS TABLE (pos integer, role text, tool_call_id text, message json, origin text,
                 score double precision, cleared boolean)
LANGUAGE plpgsql STABLE
SET hnsw.iterative_scan = 'relaxed_order'
AS $$
BEGIN
    RETURN QUERY EXECUTE format($q$
        WITH b AS (
            SELECT coalesce((SELECT s.boundary FROM summaries s
                             WHERE s.tenant = $1 AND s.session_id = $2
                               AND s.invalidated_at IS NULL
                             ORDER BY s.version DESC LIMIT 1), 0) AS boundary
        ),
        folded AS (
            SELECT e.message_id, e.embedding::vector(%1$s) <=> $4::vector(%1$s) AS d
            FROM message_embeddings e
            WHERE e.tenant = $1 AND e.session_id = $2 AND e.model = $3 AND e.dim = %1$s
              AND e.embedding IS NOT NULL AND e.pos < (SELECT boundary FROM b)
            ORDER BY d
            LIMIT 4 * $6
        ),
        dropped AS (
            SELECT e.message_id, e.embedding::vector(%1$s) <=> $4::vector(%1$s) AS d
            FROM messages m
            JOIN message_embeddings e
              ON e.message_id = m.id AND e.model = $3 AND e.dim = %1$s
            WHERE m.tenant = $1 AND m.session_id = $2 AND m.superseded_at IS NULL
              AND m.pos >= (SELECT boundary FROM b)
              AND (m.placeholder IS NOT NULL OR m.trimmed_at IS NOT NULL)
              AND e.embedding IS NOT NULL
        )
        SELECT m.pos, m.role, m.tool_call_id, m.message,
               CASE WHEN m.trimmed_at IS NOT NULL THEN 'trimmed'
                    WHEN m.pos < (SELECT boundary FROM b) THEN 'summarised'
                    ELSE 'evicted' END,
               1 - c.d, m.placeholder IS NOT NULL
        FROM (SELECT * FROM folded UNION ALL SELECT * FROM dropped) c
        JOIN messages m ON m.id = c.message_id
        WHERE m.superseded_at IS NULL AND c.d <= 1 - $5
        ORDER BY c.d
        LIMIT $6
    $q$, vector_dims(p_query))
    USING p_tenant, p_session, p_model, p_query, p_min, p_limit;
END
$$;
