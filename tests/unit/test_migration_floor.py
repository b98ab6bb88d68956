"""Every shipped migration that breaks older code says so, so ``serve`` stops before it beside
the releases it breaks and a release below it refuses to start (README: Upgrading)."""

from __future__ import annotations

import re

from proxy.store.migrations import MIGRATIONS_DIR, floor_of

_BREAKS = re.compile(
    r"\bDROP\s+(?:FUNCTION|TABLE|VIEW|TYPE)\b|\bDROP\s+COLUMN\b"
    r"|\bALTER\s+TABLE\s+[^;]*\bRENAME\b",
    flags=re.I,
)
"""What a release before the migration may still use: a function, a table, a column, a name.
An index dropped or renamed breaks no statement."""


def _statements(text: str) -> str:
    """The SQL as run now: comments and function bodies (run later, per call) dropped."""
    sql = re.sub(r"--[^\n]*", "", text)
    return re.sub(r"CREATE (?:OR REPLACE )?FUNCTION.*?\$\$.*?\$\$", "", sql, flags=re.S)


def test_a_migration_dropping_what_older_code_uses_has_a_floor() -> None:
    unmarked = []
    for path in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        text = path.read_text(encoding="utf-8")
        if _BREAKS.search(_statements(text)) and floor_of(int(path.name[:4]), text) is None:
            unmarked.append(path.name)
    assert not unmarked, (
        f"{unmarked} drop or rename what an older release may use: set the floor in the"
        " migration (COMMENT ON TABLE schema_migrations IS 'cascade: serves from NNNN')"
    )


def test_the_floor_is_read_from_the_comment_and_the_historical_drops() -> None:
    assert floor_of(40, "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0028';") == 28
    assert floor_of(20, "DROP FUNCTION f();") == 20
    assert floor_of(41, "CREATE TABLE t (x int);") is None
