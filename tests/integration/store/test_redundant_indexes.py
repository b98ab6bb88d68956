"""No index of the schema is a plain prefix of another on the same table (migration 0036):
such an index serves no lookup the longer one does not, while every write keeps it up.
memory_scope, on memory (tenant, scope), was one once memory_scope_id (0035) led with the
same columns; EXPLAIN of every statement that reads memory by scope, under each
``plan_cache_mode``, planned none on it (docs/perf.md)."""

from __future__ import annotations

from typing import Any

REDUNDANT = """
SELECT a.indexrelid::regclass::text AS index, b.indexrelid::regclass::text AS covered_by
FROM pg_index a
JOIN pg_index b ON b.indrelid = a.indrelid AND b.indexrelid <> a.indexrelid
JOIN pg_class ca ON ca.oid = a.indexrelid
JOIN pg_class cb ON cb.oid = b.indexrelid
JOIN pg_namespace n ON n.oid = ca.relnamespace AND n.nspname = 'public'
WHERE NOT a.indisunique AND a.indpred IS NULL AND a.indexprs IS NULL
  AND b.indpred IS NULL AND b.indexprs IS NULL AND ca.relam = cb.relam
  AND a.indnkeyatts <= b.indnkeyatts
  AND (a.indkey::int2[])[0:a.indnkeyatts - 1] = (b.indkey::int2[])[0:a.indnkeyatts - 1]
  AND (a.indoption::int2[])[0:a.indnkeyatts - 1] = (b.indoption::int2[])[0:a.indnkeyatts - 1]
ORDER BY 1, 2
"""


async def test_no_index_is_a_plain_prefix_of_another(pool: Any) -> None:
    rows = await pool.fetch(REDUNDANT)
    assert [(r["index"], r["covered_by"]) for r in rows] == []
