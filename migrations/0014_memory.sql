-- Memory suggestions: what became of each one, and a way to find them.
--
-- Memory promotion persists a `memory.suggestion` event ({suggestion_id, facts}) in the
-- session it came from. An event is a record of what happened and is never rewritten, so a
-- person's answer to a suggestion (accepted, with the facts kept, or rejected) is a row
-- here; a suggestion is pending while it has none. The memory API lists pending
-- suggestions across a tenant's sessions through the partial index below instead of
-- reading every context.usage row of the events table.
CREATE TABLE memory_suggestion_answers (
    tenant text NOT NULL,
    suggestion_id text NOT NULL,
    answer text NOT NULL CHECK (answer IN ('accepted', 'rejected')),
    facts jsonb NOT NULL DEFAULT '[]'::jsonb,
    answered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, suggestion_id)
);

CREATE INDEX events_memory_suggestion ON events (tenant, id)
    WHERE name = 'memory.suggestion';

-- The <memory> block of each session's current turn. The stored facts are rendered when a
-- turn starts (a new user message: turn is a hash of it) and the same text is sent on
-- every step of that turn, so a fact added or deleted mid-turn changes the prompt only at
-- the next turn, and the cached prefix of an agent's tool loop stays whole. block is NULL
-- when the scopes had no facts.
CREATE TABLE memory_blocks (
    tenant text NOT NULL,
    session_id text NOT NULL,
    turn text NOT NULL,
    block text,
    PRIMARY KEY (tenant, session_id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);
