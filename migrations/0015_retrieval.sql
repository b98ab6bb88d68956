-- Semantic retrieval: a vector per stored message and embedding model.
--
-- The background embedder (proxy/services/embedder.py) claims a batch of messages of the
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
-- search casts the same way (proxy/store/embeddings.py). A dimension without an index here
-- is searched exactly, through the session index, which is what a per-session search of
-- at most a few ten thousand rows needs anyway. pos is the message's (a message keeps its
-- position): the search ranks the rows before the summary's boundary without reading
-- messages, and reads messages only for the best few and for the evicted or trimmed rows
-- after the boundary.
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
    USING hnsw ((embedding::vector(64)) vector_cosine_ops) WHERE dim = 64;
CREATE INDEX message_embeddings_hnsw_128 ON message_embeddings
    USING hnsw ((embedding::vector(128)) vector_cosine_ops) WHERE dim = 128;
CREATE INDEX message_embeddings_hnsw_256 ON message_embeddings
    USING hnsw ((embedding::vector(256)) vector_cosine_ops) WHERE dim = 256;
CREATE INDEX message_embeddings_hnsw_384 ON message_embeddings
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dim = 384;
CREATE INDEX message_embeddings_hnsw_512 ON message_embeddings
    USING hnsw ((embedding::vector(512)) vector_cosine_ops) WHERE dim = 512;
CREATE INDEX message_embeddings_hnsw_768 ON message_embeddings
    USING hnsw ((embedding::vector(768)) vector_cosine_ops) WHERE dim = 768;
CREATE INDEX message_embeddings_hnsw_1024 ON message_embeddings
    USING hnsw ((embedding::vector(1024)) vector_cosine_ops) WHERE dim = 1024;
CREATE INDEX message_embeddings_hnsw_1536 ON message_embeddings
    USING hnsw ((embedding::vector(1536)) vector_cosine_ops) WHERE dim = 1536;
