"""Every shipped migration that breaks older code says so, so ``serve`` stops before it beside
the releases it breaks and a release below it refuses to start (README: Upgrading)."""

from __future__ import annotations

import re

import pytest

from proxy.store.migration_sql import keeps_older, reads_strings_otherwise, statements
from proxy.store.migrations import MIGRATIONS_DIR, floor_of

_OBJECT = (
    r"(?:FUNCTION|PROCEDURE|AGGREGATE|TABLE|(?:MATERIALIZED\s+)?VIEW|TYPE|DOMAIN|SCHEMA"
    r"|SEQUENCE)"
)
_BREAKS = re.compile(
    rf"\bDROP\s+{_OBJECT}\b"
    r"|\bALTER\s+TABLE\b[^;]*\bDROP\b(?!\s+(?:CONSTRAINT|NOT\s+NULL)\b)"
    rf"|\bALTER\s+{_OBJECT}\b[^;]*\bRENAME\b"
    r"|\bALTER\s+TABLE\b[^;]*\bALTER\s+(?:COLUMN\s+)?\"?\w+\"?\s+(?:SET\s+DATA\s+)?TYPE\b",
    flags=re.I,
)
"""What a release before the migration may still use: a function, a table, a column (``DROP
COLUMN`` or ``DROP`` alone, or its default), a name, a column's type (what older code reads
and writes). An index or a trigger dropped or renamed, a constraint or a NOT NULL dropped,
breaks no statement of older code."""

_DEFINED = r"(?:(?!\bDEFAULT\b|\bGENERATED\b)[^,;()]|\([^()]*\))"  # a column's words, no default
_UNSURE = re.compile(
    r"\bALTER\s+TABLE\b[^;]*\bSET\s+NOT\s+NULL\b"
    r"|\bADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?"
    r"(?!(?:CONSTRAINT|PRIMARY|UNIQUE|CHECK|FOREIGN|EXCLUDE)\b)\"?\w+\"?\s"
    rf"{_DEFINED}*?\bNOT\s+NULL\b{_DEFINED}*(?=[,;]|$)"
    r"|\bEXECUTE\b(?!\s+(?:FUNCTION|PROCEDURE)\b)|\bDO\s+(?:LANGUAGE\s+\w+\s+)?'",
    flags=re.I,
)
"""What a reading of the SQL cannot judge: a NOT NULL on a column older code may not write
(set, or a new column's with no default), dynamic SQL it cannot read (``statements`` leaves
the ``EXECUTE`` of one, and a ``DO`` quoted with ``'...'``). With a function replaced under
its name (:func:`_replaced`), it needs a floor or the migration's ``-- cascade: keeps older
code working: <why>`` (README: Upgrading)."""

_CREATED = re.compile(
    r"\bCREATE\s+(OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\s+(?:\w+\.)?\"?(\w+)\"?\s*\(", re.I
)

_REVIEWED = {
    22: "cascade_begin_step_v6 keeps its signature and result; 0021's callers queue for it",
    23: "cascade_lease_for_update_v1 only adds the notification to what it did",
    24: "cascade_window_v1 is replaced with the body it has (shipped.py: 0019)",
}
"""Shipped migrations from 0020 on (0020 breaks every release before it) that the reading
flags and that keep older code working, each with why: they cannot carry the marker now."""


def _replaced(text: str, earlier: set[str]) -> list[str]:
    """The functions ``text`` replaces that a migration before it created: older code calls
    them by name, whatever the new body means (PostgreSQL refuses another result type under
    ``CREATE OR REPLACE``, so only the meaning can change, which no reading sees)."""
    return sorted({m[2].lower() for m in _CREATED.finditer(statements(text)) if m[1]} & earlier)


def _unjudged(version: int, text: str, earlier: set[str]) -> bool:
    """Whether the migration does what the reading cannot judge, unsaid by floor or marker."""
    unsure = bool(_UNSURE.search(statements(text))) or bool(_replaced(text, earlier))
    return unsure and floor_of(version, text) is None and not keeps_older(text)


def test_a_migration_dropping_what_older_code_uses_has_a_floor() -> None:
    unmarked, unjudged = [], []
    earlier: set[str] = set()
    for path in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        text, version = path.read_text(encoding="utf-8"), int(path.name[:4])
        if _BREAKS.search(statements(text)) and floor_of(version, text) is None:
            unmarked.append(path.name)
        if version >= 20 and version not in _REVIEWED and _unjudged(version, text, earlier):
            unjudged.append(path.name)
        earlier |= {m[2].lower() for m in _CREATED.finditer(statements(text))}
    assert not unmarked, (
        f"{unmarked} drop or rename what an older release may use: set the floor in the"
        " migration (COMMENT ON TABLE schema_migrations IS 'cascade: serves from NNNN')"
    )
    assert not unjudged, (
        f"{unjudged} replace a function older code calls, set a NOT NULL or run dynamic SQL:"
        " set the floor, or say why older code keeps working"
        " (-- cascade: keeps older code working: <why>)"
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
        "ALTER TABLE sessions ALTER COLUMN tokens TYPE bigint;",
        'ALTER TABLE sessions ADD COLUMN x int, ALTER "tokens" SET DATA TYPE bigint;',
        "DO $$ BEGIN EXECUTE 'ALTER TABLE t ALTER COLUMN x TYPE text'; END $$;",
        "DO $$ BEGIN EXECUTE $q$DROP TABLE memory$q$; END $$;",
        "DO LANGUAGE plpgsql $$ BEGIN DROP TABLE memory; END $$;",
        "DO $$ BEGIN DROP TABLE memory; END $$ LANGUAGE plpgsql;",
        # a backslash-escaped quote ends no E'...' string: the statement after it is read
        "UPDATE t SET note = E'it\\'s /* ';\nDROP TABLE memory;\nUPDATE t SET note = '*/';",
    ],
)
def test_what_breaks_older_code_is_found(sql: str) -> None:
    assert _BREAKS.search(statements(sql)), statements(sql)


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
        "ALTER TABLE events ADD COLUMN type text;",
        "ALTER TABLE sessions ALTER COLUMN x SET DEFAULT 0;",
        "INSERT INTO notes VALUES ($$DROP TABLE memory$$);",  # a string, not run
    ],
)
def test_what_older_code_never_uses_is_not_taken_for_a_break(sql: str) -> None:
    assert not _BREAKS.search(statements(sql)), statements(sql)


_EXISTING = {"cascade_window_v1"}
_MARKER = "-- cascade: keeps older code working: it writes the column as the new code does\n"


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE sessions ALTER COLUMN agent SET NOT NULL;",
        "ALTER TABLE sessions ADD COLUMN x numeric(10, 2) NOT NULL, ADD y int;",
        "CREATE OR REPLACE FUNCTION cascade_window_v1(p int) RETURNS int LANGUAGE sql"
        " AS $$ SELECT 2 $$;",
        "DO $$ BEGIN EXECUTE format('DROP TABLE %I', 'memory'); END $$;",
        "DO $$ BEGIN EXECUTE 'DROP ' || 'TABLE memory'; END $$;",
        "DO $$ DECLARE q text := 'x'; BEGIN EXECUTE q; END $$;",
        "DO LANGUAGE plpgsql 'BEGIN PERFORM 1; END';",
        "EXECUTE drop_it;",
    ],
)
def test_what_the_reading_cannot_judge_needs_a_floor_or_the_marker(sql: str) -> None:
    assert _unjudged(41, sql, _EXISTING), statements(sql)
    assert not _unjudged(41, _MARKER + sql, _EXISTING)
    floor = "\nCOMMENT ON TABLE schema_migrations IS 'cascade: serves from 0041';"
    assert not _unjudged(41, sql + floor, _EXISTING)
    assert _unjudged(41, f"-- cascade: keeps older code working:\n{sql}", _EXISTING)  # no why


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TRIGGER t AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION f();",
        "DO $$ BEGIN EXECUTE 'CREATE INDEX i ON t (x)'; END $$;",
        "CREATE OR REPLACE FUNCTION cascade_window_v2(p int) RETURNS SETOF int LANGUAGE plpgsql"
        " AS $$ BEGIN RETURN QUERY EXECUTE format('SELECT %s', p); END $$;",
        "DO $$ BEGIN UPDATE t SET x = 1; END $$;",
        "ALTER TABLE t ADD COLUMN x int NOT NULL DEFAULT 0, ADD y int DEFAULT 0 NOT NULL;",
        "ALTER TABLE t ADD CONSTRAINT c CHECK (x IS NOT NULL);",
    ],
)
def test_what_the_reading_judges_needs_neither(sql: str) -> None:
    assert not _unjudged(41, sql, _EXISTING), statements(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT '" + _MARKER.strip() + "';\n",
        "COMMENT ON TABLE sessions IS $$" + _MARKER + "$$;\n",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ " + _MARKER + " SELECT 1 $$;\n",
    ],
)
def test_the_marker_is_a_comment_of_the_migration_not_a_string(sql: str) -> None:
    """A string or another function's body quoting the marker does not say it."""
    assert _unjudged(41, sql + "ALTER TABLE sessions ALTER COLUMN a SET NOT NULL;", _EXISTING)


def test_the_marker_does_not_excuse_a_break() -> None:
    assert _BREAKS.search(statements(_MARKER + "ALTER TABLE t ALTER x TYPE text;"))


def test_the_floor_is_read_from_the_comment_and_the_historical_drops() -> None:
    assert floor_of(40, "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0028';") == 28
    assert floor_of(20, "DROP FUNCTION f();") == 20
    assert floor_of(41, "CREATE TABLE t (x int);") is None


_SAYS = "COMMENT ON TABLE schema_migrations IS 'cascade: serves from 0028'"


@pytest.mark.parametrize(
    ("sql", "floor"),
    [
        (f"-- unlike {_SAYS}, this keeps older code working\n", None),
        (f"-- {_SAYS};\n", None),
        (f"/* {_SAYS}; */", None),
        (f"CREATE FUNCTION f() RETURNS void LANGUAGE sql AS $$ {_SAYS} $$;", None),
        ("COMMENT ON TABLE t IS 'cascade: serves from 0028';", None),
        ("DO $$ BEGIN EXECUTE '" + _SAYS.replace("'", "''") + "'; END $$;", 28),
        (f"{_SAYS.replace('0028', '0027')};\n{_SAYS};", 28),
        # PostgreSQL reads no keyword's case, but the ledger's reading (FLOOR, every release's
        # own) reads the comment's text exactly: another case there is no floor
        (f"{_SAYS.lower().replace('schema_migrations', 'SCHEMA_MIGRATIONS')};", 28),
        (f"{_SAYS.replace('cascade:', 'Cascade:')};", None),
        (f"SELECT E'it\\'s /* ';\n{_SAYS};\nSELECT '*/';", 28),
        (f"SELECT $${_SAYS}$$;", None),  # a string, not run
        (f"INSERT INTO notes VALUES ($q${_SAYS}$q$);", None),
        (f"DO LANGUAGE plpgsql $$ BEGIN {_SAYS}; END $$;", 28),
        (f"DO $$ BEGIN DROP TABLE IF EXISTS t2; {_SAYS}; END $$;", 28),
        # a floor in a branch, a loop or a handler runs or not as the data says: no reading
        (f"DO $$ BEGIN IF false THEN {_SAYS}; END IF; END $$;", None),
        (f"DO $$ BEGIN IF true THEN NULL; ELSE {_SAYS}; END IF; END $$;", None),
        (
            "DO $$ BEGIN IF false THEN EXECUTE '" + _SAYS.replace("'", "''") + "'; END IF; END $$;",
            None,
        ),
        (f"DO $$ BEGIN CASE WHEN false THEN {_SAYS}; ELSE NULL; END CASE; END $$;", None),
        (f"DO $$ BEGIN FOR i IN 1..0 LOOP {_SAYS}; END LOOP; END $$;", None),
        (f"DO $$ BEGIN RETURN; {_SAYS}; END $$;", None),
        (f"DO $$ BEGIN {_SAYS}; PERFORM 1/0; EXCEPTION WHEN others THEN NULL; END $$;", None),
        (
            f"DO $o$ BEGIN EXECUTE $i$ DO $$ BEGIN IF false THEN {_SAYS}; END IF; END $$ $i$;"
            " END $o$;",
            None,
        ),
    ],
)
def test_the_floor_is_what_the_migration_runs(sql: str, floor: int | None) -> None:
    """A ``COMMENT`` quoted in a comment, commented out, or in a function's body sets no
    floor; one a ``DO`` block executes does, unless the block's control flow (a branch, a
    loop, a ``RETURN``, a handler rolling it back) may skip it: the runner reads that one
    from the ledger once the migration ran."""
    assert floor_of(41, "CREATE TABLE t (x int);\n" + sql) == floor


@pytest.mark.parametrize(
    "floor",
    [
        f"DO $$ BEGIN IF false THEN {_SAYS}; END IF; END $$;",
        f"DO $$ BEGIN IF current_setting('x.y', true) = 'z' THEN {_SAYS}; END IF; END $$;",
    ],
)
def test_a_drop_behind_a_conditional_floor_fails_the_check(floor: str) -> None:
    """A floor that may not run is no floor the check accepts for a drop."""
    sql = f"{floor}\nDROP TABLE memory;"
    assert _BREAKS.search(statements(sql))
    assert floor_of(41, sql) is None
    assert floor_of(41, f"{sql}\n{_SAYS};") == 28


def test_no_migration_changes_how_strings_are_read() -> None:
    """The reading above, and the server under the runner, take a backslash in ``'...'`` for
    itself (``standard_conforming_strings`` on): a migration turning it off would run SQL
    the reading took for a string."""
    changes = [
        p.name
        for p in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
        if reads_strings_otherwise(p.read_text(encoding="utf-8"))
    ]
    assert not changes, f"{changes} set standard_conforming_strings: leave it on"


@pytest.mark.parametrize(
    ("sql", "flagged"),
    [
        ("SET standard_conforming_strings = off;", True),
        ("SET LOCAL Standard_Conforming_Strings TO false;", True),
        ("SELECT set_config('standard_conforming_strings', 'off', true);", True),
        ("DO $$ BEGIN EXECUTE 'SET standard_conforming_strings = off'; END $$;", True),
        ("ALTER DATABASE cascade SET standard_conforming_strings = off;", True),
        ("RESET ALL;", True),  # back to the database's or the role's, which may be off
        ("reset  all;", True),
        ("-- no RESET ALL here\nCREATE TABLE t (x int);", False),
        ("-- standard_conforming_strings stays on\nCREATE TABLE t (x int);", False),
        ("/* standard_conforming_strings */ CREATE TABLE t (x int);", False),
    ],
)
def test_a_migration_setting_how_strings_are_read_is_flagged(sql: str, flagged: bool) -> None:
    assert reads_strings_otherwise(sql) is flagged


def test_the_reading_takes_a_backslash_in_a_string_for_itself() -> None:
    """What the server runs with ``standard_conforming_strings`` on (the runner's): with it
    off, ``'a\\'; -- '`` is one string and the ``DROP`` here runs (``test_migrations.py``
    shows the runner keeps it on)."""
    assert not _BREAKS.search(statements("SELECT 'a\\'; -- '; DROP TABLE keep;"))
