CREATE EXTENSION IF NOT EXISTS vector;

-- One row per (tenant, session). Counters used by the cascade live here so a request reads
-- one row to learn occupancy, calibration and where the live history ends.
CREATE TABLE sessions (
    tenant              text        NOT NULL,
    id                  text        NOT NULL,
    agent               text        NOT NULL DEFAULT 'default',
    model               text,
    parent_id           text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    head_len            integer     NOT NULL DEFAULT 0,   -- live messages: positions 0..head_len-1
    head_hash           text,                             -- chain hash of position head_len-1
    system_count        integer     NOT NULL DEFAULT 0,   -- leading system/developer messages
    last_prompt_tokens  integer,                          -- provider's real usage.prompt_tokens
    last_estimate       integer,                          -- our estimate of that same prompt
    calibration         double precision NOT NULL DEFAULT 1.0,
    reclaimed_tokens    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id)
);

-- Every message a client ever sent, and every reply the proxy relayed. Superseded rows are
-- marked, never deleted. `message` is the prompt form (redacted/truncated/evicted), stored as
-- json (not jsonb) so key order and unknown fields come back exactly as they went in;
-- `hash` chains over the canonical JSON of what the client sent.
CREATE TABLE messages (
    id              bigserial   PRIMARY KEY,
    tenant          text        NOT NULL,
    session_id      text        NOT NULL,
    pos             integer     NOT NULL,
    hash            text        NOT NULL,
    role            text        NOT NULL,
    message         json        NOT NULL,
    tool_call_id    text,
    tokens          integer     NOT NULL DEFAULT 0,
    redacted        boolean     NOT NULL DEFAULT false,
    evicted_at      timestamptz,
    trimmed_at      timestamptz,                 -- dropped by the overflow guard, for good
    superseded_at   timestamptz,
    source          text        NOT NULL DEFAULT 'client',
    created_at      timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX messages_live_pos ON messages (tenant, session_id, pos)
    WHERE superseded_at IS NULL;
CREATE INDEX messages_hash ON messages (tenant, session_id, hash) WHERE superseded_at IS NULL;
CREATE INDEX messages_all ON messages (tenant, session_id, pos, id);

CREATE TABLE tool_raw_outputs (
    tenant          text        NOT NULL,
    session_id      text        NOT NULL,
    tool_call_id    text        NOT NULL,
    content         text        NOT NULL,
    original_bytes  bigint      NOT NULL,
    capped          boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, session_id, tool_call_id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);

CREATE TABLE summaries (
    tenant          text        NOT NULL,
    session_id      text        NOT NULL,
    version         integer     NOT NULL,
    boundary        integer     NOT NULL,   -- first position NOT folded into this summary
    boundary_hash   text,                   -- chain hash of position boundary-1
    content         text        NOT NULL,
    tokens          integer     NOT NULL DEFAULT 0,
    model           text,
    invalidated_at  timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, session_id, version),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);

CREATE TABLE events (
    id              bigserial   PRIMARY KEY,
    tenant          text        NOT NULL,
    session_id      text        NOT NULL,
    name            text        NOT NULL,
    data            jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);
CREATE INDEX events_session ON events (tenant, session_id, id);

CREATE TABLE memory (
    id              bigserial   PRIMARY KEY,
    tenant          text        NOT NULL,
    scope           text        NOT NULL DEFAULT 'global',
    fact            text        NOT NULL,
    source_session  text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_scope ON memory (tenant, scope);
