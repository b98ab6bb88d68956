-- The per-turn stages' values, kept with the session for its current turn.
--
-- A per-turn stage (memory injection, recitation, retrieval: proxy/cascade/phases.py) computes
-- its block when a turn begins (a new user message) and every later step of that turn, the
-- agent's tool loop, sends the same bytes, so the prompt prefix a provider caches stays
-- whole and nothing is injected twice. turn_key names the turn (the chain hash of the
-- message that began it); turn_blocks holds each stage's value as JSON text (text, not
-- json or jsonb: the session row travels as jsonb, which refuses a \u0000 escape and
-- reorders keys; this text is ASCII with every such character escaped). Both are written by
-- the statement that records the step's reply (record_step), so keeping them costs no
-- statement, and begin_step's session row brings them back on the next step.
ALTER TABLE sessions ADD COLUMN turn_key text, ADD COLUMN turn_blocks text;

-- memory_blocks (0014) kept the <memory> block alone, in a statement of its own per step;
-- the block is now one of the turn's values above.
DROP TABLE memory_blocks;
