-- A scope's facts in id order (oldest first), each scope its own range: the memory stage
-- reads the oldest few of a session's two scopes (global and its agent's) as one ordered
-- range each (proxy/store/memory.py, SESSION_FACTS), however many facts the tenant's other
-- scopes hold. Without it the planner walked the tenant's every fact in id order for a
-- session whose scopes are small beside another agent's large one (docs/perf.md).
-- memory_scope (0001) stays: the previous code reads through it until it is replaced.
-- The statement may run again (IF NOT EXISTS), as a ledger rewound past it runs it.
CREATE INDEX IF NOT EXISTS memory_scope_id ON memory (tenant, scope, id);
