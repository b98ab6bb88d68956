-- memory_scope (0001, on memory (tenant, scope)) is read by nothing: every statement that
-- reads memory by scope, this release's and the one before 0035's alike, is planned on
-- memory_scope_id (0035, on (tenant, scope, id)), memory_fact_key (0030, (tenant, scope,
-- fact_key)), memory_unkeyed_stops (0034) or memory_pkey, each of which leads with the same
-- columns or orders by id (docs/perf.md, "memory_scope unused"). Each write kept it too.
-- Dropping an index breaks no statement of older code, so no floor is set: a release that
-- still runs reads the same rows through memory_scope_id.
-- The statement may run again (IF EXISTS), as a ledger rewound past it runs it.
DROP INDEX IF EXISTS memory_scope;
