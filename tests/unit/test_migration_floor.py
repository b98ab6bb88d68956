"""Every shipped migration that breaks older code says so, so ``serve`` stops before it beside
the releases it breaks and a release below it refuses to start (README: Upgrading)."""

from __future__ import annotations

import re

import pytest

from proxy.store.migrations import MIGRATIONS_DIR, floor_of

_OBJECT = (
    r"(?:FUNCTION|PROCEDURE|AGGREGATE|TABLE|(?:MATERIALIZED\s+)?VIEW|TYPE|DOMAIN|SCHEMA"
    r"|SEQUENCE)"
)
_BREAKS = re.compile(
    rf"\bDROP\s+{_OBJECT}\b"
    r"|\bALTER\s+TABLE\b[^;]*\bDROP\b(?!\s+(?:CONSTRAINT|NOT\s+NULL)\b)"
    rf"|\bALTER\s+{_OBJECT}\b[^;]*\bRENAME\b",
    flags=re.I,
)
"""What a release before the migration may still use: a function, a table, a column (``DROP
COLUMN`` or ``DROP`` alone, or its default), a name. An index or a trigger dropped or renamed,
a constraint or a NOT NULL dropped, breaks no statement of older code."""

_TOKEN = re.compile(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|(\$(?:[A-Za-z_]\w*)?\$)(.*?)\1|;", re.S)
_DEFERRED = re.compile(r"\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\b", re.I)


def _statements(text: str) -> str:
    """The SQL as run now: comments dropped, and the bodies of the functions it creates (run
    later, per call, whether quoted with ``$$``, a tagged ``$fn$`` or ``'...'``); a ``DO``
    block's body runs now and is kept, read the same way."""
    out: list[str] = []
    statement = 0  # where in ``out`` the statement being read begins
    pos = 0
    for token in _TOKEN.finditer(text):
        out.append(text[pos : token.start()])
        pos = token.end()
        if token[0] == ";":
            out.append(";")
            statement = len(out)
        elif token[0].startswith(("--", "/*")):
            out.append(" ")
        elif _DEFERRED.match("".join(out[statement:])):
            out.append("''")
        elif token[1] is not None:  # a DO block's body, or another dollar-quoted string
            out.append(_statements(token[2]))
        else:
            out.append(token[0])
    out.append(text[pos:])
    return "".join(out)


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


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE sessions DROP turn_key;",  # COLUMN is optional
        "ALTER TABLE sessions ALTER COLUMN handoff_above DROP DEFAULT;",
        "ALTER FUNCTION cascade_begin_step_v7(json) RENAME TO cascade_step;",
        "ALTER VIEW v RENAME TO w;",
        "DROP MATERIALIZED VIEW mv;",
        "DROP PROCEDURE p();",
        "DROP SEQUENCE s;",
        "DROP SCHEMA old CASCADE;",
        "DROP FUNCTION IF EXISTS cascade_begin_step_v7(text);",
        "/* gone */ DROP TABLE memory;",
        "DO $$ BEGIN ALTER TABLE sessions RENAME COLUMN a TO b; END $$;",
        "DO $do$ BEGIN EXECUTE 'ALTER TABLE sessions DROP COLUMN a'; END $do$;",
        # a statement between two functions' bodies is not taken for a body
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $f$ SELECT 1 $f$;\nDROP TABLE memory;\n"
        "CREATE FUNCTION g() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1';\nDROP TABLE memory;\n"
        "CREATE FUNCTION g() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;",
    ],
)
def test_what_breaks_older_code_is_found(sql: str) -> None:
    assert _BREAKS.search(_statements(sql)), _statements(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER INDEX messages_session_hash RENAME TO messages_hash;",
        "DROP INDEX messages_hash;",
        "DROP TRIGGER IF EXISTS events_reclaimed ON events;",
        "ALTER TABLE sessions DROP CONSTRAINT c, ALTER COLUMN x DROP NOT NULL;",
        "-- DROP TABLE memory\nCREATE TABLE t (x int);",
        "CREATE OR REPLACE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $body$\n"
        "BEGIN EXECUTE 'DROP TABLE t'; END $body$;",
        "COMMENT ON TABLE sessions IS 'rows -- dropped';",
    ],
)
def test_what_older_code_never_uses_is_not_taken_for_a_break(sql: str) -> None:
    assert not _BREAKS.search(_statements(sql)), _statements(sql)


def test_the_floor_is_read_from_the_comment_and_the_historical_drops() -> None:
    assert floor_of(40, "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0028';") == 28
    assert floor_of(20, "DROP FUNCTION f();") == 20
    assert floor_of(41, "CREATE TABLE t (x int);") is None
