-- Three indexes on messages instead of four: every request inserts two messages, and each
-- index is one more insertion and more WAL (bench/overhead, tiny c=32: about 6% more
-- requests per second without messages_all).
--
-- messages_all (tenant, session_id, pos, id) served the session API's listing with
-- superseded rows and the cascade deletes. The hash index now covers every row (superseded
-- ones too), so its (tenant, session_id) prefix serves those; live rows by position, the
-- window included, go through messages_live_pos.
CREATE INDEX messages_session_hash ON messages (tenant, session_id, hash);
DROP INDEX messages_hash;
DROP INDEX messages_all;
ALTER INDEX messages_session_hash RENAME TO messages_hash;
