"""No index of the schema is a plain prefix of another on the same table (migration 0036
drops the one that was: memory_scope, docs/perf.md): such an index serves no lookup the
longer one does not, while every write keeps it up. Plain means the same key columns in the
same order, sort direction, collation and operator class, with no uniqueness, predicate,
expression or INCLUDE columns of its own, each of which serves what the longer one cannot."""

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
  AND a.indnatts = a.indnkeyatts AND a.indnkeyatts <= b.indnkeyatts
  AND (a.indkey::int2[])[0:a.indnkeyatts - 1] = (b.indkey::int2[])[0:a.indnkeyatts - 1]
  AND (a.indoption::int2[])[0:a.indnkeyatts - 1] = (b.indoption::int2[])[0:a.indnkeyatts - 1]
  AND (a.indcollation::oid[])[0:a.indnkeyatts - 1] = (b.indcollation::oid[])[0:a.indnkeyatts - 1]
  AND (a.indclass::oid[])[0:a.indnkeyatts - 1] = (b.indclass::oid[])[0:a.indnkeyatts - 1]
ORDER BY 1, 2
"""


async def test_no_index_is_a_plain_prefix_of_another(pool: Any) -> None:
    rows = await pool.fetch(REDUNDANT)
    assert [(r["index"], r["covered_by"]) for r in rows] == []


PLANTED = """
CREATE TABLE probe (x int, y int, z int, t text);
CREATE INDEX probe_x ON probe (x);
CREATE INDEX probe_xy ON probe (x, y);
CREATE UNIQUE INDEX probe_y_unique ON probe (y);
CREATE INDEX probe_yz ON probe (y, z);
CREATE INDEX probe_z_partial ON probe (z) WHERE z > 0;
CREATE INDEX probe_zx ON probe (z, x);
CREATE INDEX probe_lower ON probe (lower(t));
CREATE INDEX probe_lower_x ON probe (lower(t), x);
CREATE INDEX probe_t_incl ON probe (t) INCLUDE (z);
CREATE INDEX probe_ty ON probe (t, y);
CREATE INDEX probe_y_desc ON probe (y DESC);
CREATE INDEX probe_t_c ON probe (t COLLATE "C");
CREATE INDEX probe_t_pattern ON probe (t text_pattern_ops);
"""


async def test_the_check_flags_a_plain_prefix_and_nothing_that_serves_more(pool: Any) -> None:
    """Only ``probe_x`` is redundant: a unique prefix enforces what the longer one does not,
    a partial or an expression index reads other rows or values, one with INCLUDE columns
    answers index-only scans the longer one cannot, a descending one (or another collation
    or operator class) another order."""
    await pool.execute(PLANTED)
    rows = await pool.fetch(REDUNDANT)
    found = [(r["index"], r["covered_by"]) for r in rows if r["index"].startswith("probe")]
    assert found == [("probe_x", "probe_xy")]
