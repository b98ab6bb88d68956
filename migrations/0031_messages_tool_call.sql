-- Index messages by tool call id: the rows stored under one id, found without reading the
-- whole session.
--
-- read_tool_output finds the rows under an id (store/raw_outputs.py: the read's first query,
-- FETCHROW_RAW_OUTPUT, the newest row under the id; the version query, FETCH_VERSION,
-- every row under it). With no index on tool_call_id each read every row of the session
-- (messages_session_pos, or a backward walk of the primary key) for the few it wants, on
-- every page. Partial, as most rows (user, assistant, system) have no id; the trailing id
-- gives the read's newest row under the id (ORDER BY id DESC LIMIT 1) as the index's last
-- entry, where an id a client uses every turn (call_0) has a row per turn.
-- messages_evicted (0008) leads with the same columns but holds evicted rows only.
-- A plain CREATE INDEX, as 0009's: on a large messages table writes wait until it is built.
CREATE INDEX IF NOT EXISTS messages_tool_call ON messages (tenant, session_id, tool_call_id, id)
    WHERE tool_call_id IS NOT NULL;
