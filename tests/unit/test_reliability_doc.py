"""RELIABILITY.md is generated (``make reliability``), never edited; these hold it to the
suites it reports on, so a test added, removed or renamed there, the race suite left out of
the run, or a fault kind added to the upstream-faults check fails here until the document is
generated again, instead of leaving it silently stale."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "RELIABILITY.md").read_text()
ROW = re.compile(
    r"^\| (?P<check>.+?) \| `(?P<test>[^`]+)` \| (?P<tried>[\d,]+) \| (?P<held>[^|]+) \|"
    r" (?P<figures>[^|]*) \|",
    re.M,
)


def _races() -> list[str]:
    """The race suite's files, as ``make reliability`` passes them to pytest."""
    line = next(x for x in (ROOT / "Makefile").read_text().splitlines() if x.startswith("RACES ="))
    return line.split("=", 1)[1].split()


def _tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
    }


def _suites() -> dict[str, Path]:
    """Each file the document reports on, by the name its rows give it."""
    files = {p.name: p for p in sorted((ROOT / "tests/reliability").glob("test_*.py"))}
    files.update({r.removeprefix("tests/"): ROOT / r for r in _races()})
    return files


def test_the_document_lists_every_test_of_the_suites_and_no_other() -> None:
    listed = {m["test"] for m in ROW.finditer(DOC)}
    want = {f"{name}::{t}" for name, path in _suites().items() for t in _tests(path)}
    assert listed == want, "run `make reliability` to generate RELIABILITY.md again"


def test_the_race_suite_is_what_the_reliability_run_records() -> None:
    races = _races()
    conftest = ast.parse((ROOT / "tests/reliability/conftest.py").read_text())
    recorded = next(
        ast.literal_eval(n.value)
        for n in conftest.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "RACES"
    )
    assert races and list(recorded) == races


def test_every_check_held_and_the_fault_kinds_are_the_suites() -> None:
    rows = {m["test"]: m for m in ROW.finditer(DOC)}
    assert {m["held"] for m in rows.values()} <= {"yes", "skipped (soak)"}
    faults = ast.parse((ROOT / "tests/reliability/test_upstream_faults.py").read_text())
    kinds = next(
        len(n.value.keys)
        for n in faults.body
        if isinstance(n, ast.AnnAssign)
        and getattr(n.target, "id", None) == "FAULTS"
        and isinstance(n.value, ast.Dict)
    )
    row = rows[
        "test_upstream_faults.py::test_upstream_faults_answer_as_documented_and_store_only_good_turns"
    ]
    assert f"kinds {kinds};" in row["figures"]
