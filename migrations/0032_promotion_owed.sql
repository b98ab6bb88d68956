-- The memory promotion a session's stored summary still owes (services/promotion.py): the
-- span [promotion_from, promotion_to) whose facts are not extracted yet, and when a request
-- of the session may take it over from the process that stored the summary. Set in the
-- summary's insert transaction, cleared once the promotion ends, so a stop or a kill between
-- the two leaves it for the session's next request (no fact extracted twice as a rule, and
-- none lost). On the sessions row because every step reads that row already.
-- Each statement may run again (IF NOT EXISTS), as a ledger rewound past it runs it.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS promotion_from integer;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS promotion_to integer;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS promotion_due timestamptz;
