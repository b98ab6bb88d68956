"""README's upgrade advice against what the migrations do: the slow ones it names (those that
read a whole table while requests wait for their lock) and the release a rolling upgrade
cannot keep serving (one calling a SQL function a later migration drops). A new migration of
either kind fails here until README names it."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.store.migrations import MIGRATIONS_DIR
from tests.unit.readme import TEXT

FIRST_UPGRADED = 5  # README: a database from e6249af (migrations up to 0004) upgrades in place
GROWING = (
    "sessions",
    "messages",
    "events",
    "tool_raw_outputs",
    "tool_raw_output_versions",
    "message_embeddings",
    "summaries",
)
"""Tables that grow with every request (or every session): a statement reading all of one
takes as long as the deployment is old. ``memory`` holds facts, a few per scope."""


def _section(start: str, end: str) -> str:
    text = TEXT[TEXT.index(start) :]
    return " ".join(text[: text.index(end)].split())


def _statements(path: Path) -> str:
    """The file's SQL as run: comments and function bodies (run later, per call) dropped;
    ``DO`` blocks, which run now, kept."""
    sql = re.sub(r"--[^\n]*", "", path.read_text(encoding="utf-8"))
    return re.sub(r"CREATE (?:OR REPLACE )?FUNCTION.*?\$\$.*?\$\$", "", sql, flags=re.S)


def _migrations() -> list[tuple[int, str]]:
    return [(int(p.name[:4]), _statements(p)) for p in sorted(MIGRATIONS_DIR.glob("0*_*.sql"))]


def _whole_table_reads(sql: str) -> set[str]:
    """The growing tables the statements read whole: a plain ``CREATE INDEX`` (not
    ``CONCURRENTLY``, so writes wait for the build), an ``UPDATE``/``DELETE``, a ``SELECT``
    (a ``DO`` block's loop, an ``INSERT … SELECT``) or a column's type changed (a rewrite).
    A table is named bare or schema-qualified, in either case."""
    table = r"(?:\w+\.)?(\w+)"
    named = r"(?:IF\s+NOT\s+EXISTS\s+)?(?:\w+\s+)?"
    index = rf"CREATE\s+(?:UNIQUE\s+)?INDEX\s+{named}ON\s+(?:ONLY\s+)?{table}"
    rewrite = rf"\b(?:UPDATE|DELETE\s+FROM|FROM|JOIN)\s+(?:ONLY\s+)?{table}"
    retype = rf"ALTER\s+TABLE\s+(?:ONLY\s+)?{table}[^;]*\bTYPE\b"
    found = re.findall(f"{index}|{rewrite}|{retype}", sql, flags=re.I)
    created = r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:\w+\.)?(\w+)"
    new = {name.lower() for name in re.findall(created, sql, flags=re.I)}  # empty yet
    return {n.lower() for group in found for n in group if n.lower() in set(GROWING) - new}


def test_a_statement_reading_a_growing_table_whole_counts_as_slow() -> None:
    """What a new slow migration may look like, not only the shapes the shipped ones have: a
    ``DO`` block's loop or an ``INSERT … SELECT`` over a table (0025), an unnamed or
    schema-qualified index, a column's type changed (a rewrite), SQL in lower case."""
    shipped = next(sql for v, sql in _migrations() if v == 25)
    assert _whole_table_reads(shipped) == {"sessions", "tool_raw_output_versions"}
    for sql, table in [
        ("INSERT INTO t (x) SELECT x FROM events;", "events"),
        (
            "DO $$ BEGIN FOR r IN SELECT id FROM messages m JOIN t ON true LOOP END LOOP; END $$;",
            "messages",
        ),
        ("CREATE INDEX ON messages (tenant, pos);", "messages"),
        ("CREATE INDEX m_x ON public.messages (x);", "messages"),
        ("create index m_x on messages (x);", "messages"),
        ("ALTER TABLE events ALTER COLUMN data TYPE jsonb;", "events"),
        ("update sessions set x = 1;", "sessions"),
        ("CREATE INDEX e_x ON message_embeddings (x);", "message_embeddings"),
    ]:
        assert _whole_table_reads(sql) == {table}, sql
    assert _whole_table_reads("ALTER TABLE sessions ADD COLUMN x int;") == set()
    made = "CREATE TABLE public.summaries (x int); CREATE INDEX s_x ON summaries (x);"
    assert _whole_table_reads(made) == set()  # a table the migration makes is empty


def test_every_slow_migration_is_named_where_readme_lists_them() -> None:
    slow = [v for v, sql in _migrations() if v >= FIRST_UPGRADED and _whole_table_reads(sql)]
    named = _section("Migrations run at start-up", "An applied migration is never edited")
    missing = [f"{v:04d}" for v in slow if f"{v:04d}" not in named]
    assert not missing, f"README (Deploying) does not name these slow migrations: {missing}"


def test_the_release_a_rolling_upgrade_breaks_is_named_by_the_last_dropped_function() -> None:
    """A migration that drops a function leaves every replica of a release calling it failing
    each chat from the moment it runs (as intended: docs/architecture.md); README says from
    which release on a rolling upgrade to this one is safe, and what to do before it."""
    drops = [v for v, sql in _migrations() if re.search(r"DROP FUNCTION", sql)]
    upgrading = _section("### Upgrading", "### Backup")
    assert f"before {max(drops):04d}" in upgrading
