-- The rows the proxy keys (proxy/store/memory.py, UNKEYED_ROW): those without a key, and
-- those with a key of the form before migration 0033 (closing full stops kept: a key that
-- ends in one and is not stops alone). A replica still on that code during a rolling
-- upgrade keys the rows 0033 cleared in its form, at a write of the scope or at its start,
-- and would otherwise leave them so for good: "X." keyed "x." lets "X" in. With this index
-- a write's test of its scope and the start's search for the next scope stay one lookup,
-- and each batch of a scope (oldest first: id) reads its own rows, however large the table.
-- memory_unkeyed (0030) stays: the previous code reads through it until it is replaced.
-- The statement may run again (IF NOT EXISTS), as a ledger rewound past it runs it.
CREATE INDEX IF NOT EXISTS memory_unkeyed_stops ON memory (tenant, scope, id)
WHERE fact_key IS NULL OR (right(fact_key, 1) IN ('.', '。') AND rtrim(fact_key, ' .。') <> '');
