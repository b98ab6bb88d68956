-- Semantic retrieval: a vector per stored message and embedding model.
--
-- The background embedder (proxy/services/retrieval.py) claims a batch of messages of the
-- sessions that have retrieval on by inserting their rows here with no vector yet
-- (claimed_at set; ON CONFLICT DO NOTHING, so two replicas never embed the same message),
-- embeds them off the request path and fills the vectors in. A row whose message has no
-- text keeps a NULL vector and a NULL claimed_at: done, nothing to find. A claim whose
-- replica died is released after a minute and claimed again.
--
-- Vectors of every model live in one column without a declared dimension; each row names
-- its model and dim, and retrieval reads only the configured model's rows at its dimension,
-- so changing the model or its dimension never mixes two vector spaces. HNSW needs a fixed
-- dimension, so each usual dimension has a partial index over the column cast to it; the
-- search (cascade_related, below) casts the same way. A dimension without an index here is
-- searched exactly, through the session index, which is what the planner also picks when a
-- session is a small part of the table. m is 8 and ef_construction 32, half pgvector's
-- defaults: building the graph is most of the cost of storing a vector, which the
-- background embedder pays for every message (docs/perf.md, Issue 22), a search needs
-- only a handful of related snippets, and a session-filtered iterative scan makes up for
-- the coarser graph by reading on. pos is the message's (a message keeps its
-- position): the search ranks the rows before the summary's boundary without reading
-- messages.
CREATE TABLE message_embeddings (
    message_id bigint NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    model text NOT NULL,
    tenant text NOT NULL,
    session_id text NOT NULL,
    pos integer NOT NULL,
    dim integer NOT NULL DEFAULT 0,
    embedding vector,
    claimed_at timestamptz,
    PRIMARY KEY (message_id, model)
);

CREATE INDEX message_embeddings_session
    ON message_embeddings (tenant, session_id, model, dim, pos);

CREATE INDEX message_embeddings_claims ON message_embeddings (claimed_at)
    WHERE claimed_at IS NOT NULL;

CREATE INDEX message_embeddings_hnsw_64 ON message_embeddings
    USING hnsw ((embedding::vector(64)) vector_cosine_ops)
    WITH (m = 8, ef_construction = 32) WHERE dim = 64;
CREATE INDEX message_embeddings_hnsw_128 ON message_embeddings
    USING hnsw ((embedding::vector(128)) vector_cosine_ops)
    WITH (m = 8, ef_construction = 32) WHERE dim = 128;
CREATE INDEX message_embeddings_hnsw_256 ON message_embeddings
    USING hnsw ((embedding::vector(256)) vector_cosine_ops)
    WITH (m = 8, ef_construction = 32) WHERE dim = 256;
CREATE INDEX message_embeddings_hnsw_384 ON message_embeddings
    USING hnsw ((embedding::vector(384)) vector_cosine_ops)
    WITH (m = 8, ef_construction = 32) WHERE dim = 384;
CREATE INDEX message_embeddings_hnsw_512 ON message_embeddings
    USING hnsw ((embedding::vector(512)) vector_cosine_ops)
    WITH (m = 8, ef_construction = 32) WHERE dim = 512;
CREATE INDEX message_embeddings_hnsw_768 ON message_embeddings
    USING hnsw ((embedding::vector(768)) vector_cosine_ops)
    WITH (m = 8, ef_construction = 32) WHERE dim = 768;
CREATE INDEX message_embeddings_hnsw_1024 ON message_embeddings
    USING hnsw ((embedding::vector(1024)) vector_cosine_ops)
    WITH (m = 8, ef_construction = 32) WHERE dim = 1024;
CREATE INDEX message_embeddings_hnsw_1536 ON message_embeddings
    USING hnsw ((embedding::vector(1536)) vector_cosine_ops)
    WITH (m = 8, ef_construction = 32) WHERE dim = 1536;

-- The search of one session (proxy/store/embeddings.py search_outside_prompt): the messages
-- of p_model's vectors at the query's dimension that are outside the prompt, best first.
-- Two kinds of candidates, each read the cheap way: the rows before the latest summary's
-- boundary, ranked on message_embeddings alone (the best 4 x p_limit, so a superseded
-- message among them does not leave the answer short), and the rows after it that eviction
-- or the overflow guard took out of the prompt, found from messages (the window: a few
-- rows). messages is read by id only for those candidates.
--
-- The dimension is written into the statement (EXECUTE format), so the planner can use the
-- HNSW index of that dimension. An HNSW scan filtered to one session would stop after
-- hnsw.ef_search candidates and return fewer rows than asked when most of them belong to
-- other sessions or lie inside the prompt; the function sets pgvector's iterative scan
-- (0.8+) for its own duration only, so the scan goes on until the LIMIT is met (bounded by
-- hnsw.max_scan_tuples), and leaves no setting behind on a pooled connection.
CREATE FUNCTION cascade_related(
    p_tenant text, p_session text, p_model text, p_query vector, p_min double precision,
    p_limit integer
) RETURNS TABLE (pos integer, role text, tool_call_id text, message json, origin text,
                 score double precision)
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
                    WHEN m.placeholder IS NOT NULL THEN 'evicted'
                    ELSE 'summarised' END,
               1 - c.d
        FROM (SELECT * FROM folded UNION ALL SELECT * FROM dropped) c
        JOIN messages m ON m.id = c.message_id
        WHERE m.superseded_at IS NULL AND c.d <= 1 - $5
        ORDER BY c.d
        LIMIT $6
    $q$, vector_dims(p_query))
    USING p_tenant, p_session, p_model, p_query, p_min, p_limit;
END
$$;
