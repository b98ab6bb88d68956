-- memory.fact_key: the form two facts of a scope are compared in (cascade.memory.fact_key:
-- cleaned, NFKC, joiners dropped, whitespace collapsed, case-folded), so the duplicate check
-- of a write is an index lookup and a unique index instead of reading the whole scope.
--
-- The key is computed by the proxy, not here: the normalisation uses Python's Unicode tables
-- (categories Cc/Cf/Cs, `\s`, NFKC, full case folding) and Postgres has no exact equivalent
-- (no casefold before 18, `lower` follows the collation, `normalize` follows the server's
-- Unicode version). Existing rows, and rows a replica still on the previous code writes
-- during a rolling upgrade, have no key (NULL, the default, which the unique index lets
-- repeat); the proxy keys them (proxy/store/memory.py) once it starts, in the background,
-- a batch of one scope per transaction under the scope's lock, and a write keys its own
-- scope's first, under the same lock, committed with the write; either resumes wherever a
-- stop left it.
-- Each statement may run again (IF NOT EXISTS), as a ledger rewound past it runs it.
ALTER TABLE memory ADD COLUMN IF NOT EXISTS fact_key text;

CREATE UNIQUE INDEX IF NOT EXISTS memory_fact_key ON memory (tenant, scope, fact_key);

CREATE INDEX IF NOT EXISTS memory_unkeyed ON memory (tenant, scope) WHERE fact_key IS NULL;
