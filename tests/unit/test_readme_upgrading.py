"""README's upgrade advice against what the migrations do: the slow ones it names (those that
read a whole table while requests wait for their lock) and the release a rolling upgrade
cannot keep serving (one calling a SQL function a later migration drops). A new migration of
either kind fails here until README names it."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.store.migrations import MIGRATIONS_DIR

TEXT = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
FIRST_UPGRADED = 5  # README: a database from e6249af (migrations up to 0004) upgrades in place
GROWING = ("sessions", "messages", "events", "tool_raw_outputs", "summaries")
"""Tables that grow with every request (or every session): a statement reading all of one
takes as long as the deployment is old."""


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
    ``CONCURRENTLY``, so writes wait for the build) or an ``UPDATE``/``DELETE``."""
    index = r"CREATE (?:UNIQUE )?INDEX (?:IF NOT EXISTS )?\w+\s+ON\s+(\w+)"
    rewrite = r"\b(?:UPDATE|DELETE FROM)\s+(\w+)"
    found = re.findall(f"{index}|{rewrite}", sql)
    return {table for pair in found for table in pair if table in GROWING}


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
