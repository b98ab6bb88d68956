"""docs/architecture.md names modules, functions, stages, SQL functions and migrations the code
defines; these tie the two together, so a moved module, a renamed function, a reordered stage
or a dropped SQL function fails here instead of leaving the walk-through silently wrong."""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

import pytest

from proxy.bus import EventBus
from proxy.cascade.pipeline import STAGES
from proxy.services.chat import ChatService
from proxy.services.turn import Turn

ROOT = Path(__file__).parents[2]
TEXT = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
DOC = " ".join(TEXT.split())
"""The doc with every run of whitespace one blank, so a phrase may wrap anywhere."""
NAMED = sorted(set(re.findall(r"`([^`\n]+)`", TEXT)))

EXAMPLES = {"proxy/cascade/note.py", "tests/unit/cascade/test_note.py"}
"""Files of the toy ``note`` stage the doc walks through: they exist only in its example."""

CLASSES = {"Turn": Turn, "ChatService": ChatService, "EventBus": EventBus}


def _path(name: str) -> Path | None:
    """The file a named path stands for: from the checkout's root, or under ``proxy/``."""
    if re.fullmatch(r"(proxy|tests|migrations|docs)/[\w./-]+", name):
        return ROOT / name
    if re.fullmatch(r"((api|services|store|cascade)/)?\w+\.py", name):
        return ROOT / "proxy" / name
    return None


def test_every_file_the_doc_names_exists() -> None:
    paths = {name: _path(name) for name in NAMED if name not in EXAMPLES}
    named = {name: path for name, path in paths.items() if path is not None}
    assert {"api/chat.py", "proxy/services/needs.py", "migrations/schema.sql"} <= set(named)
    assert [name for name, path in named.items() if not path.exists()] == []


def _attributes() -> list[tuple[str, object, str]]:
    """(as named, the object it is read from, the attribute) for each ``module.attr`` (a
    module under ``proxy/``, named by path or dots) and ``Class.member`` the doc names."""
    found: list[tuple[str, object, str]] = []
    for name in NAMED:
        if name.endswith(".py"):
            continue
        dotted = re.fullmatch(r"((?:api|services|store|cascade)[/.]\w+)\.(\w+)(?:\(.*\))?", name)
        member = re.fullmatch(r"(\w+)\.(\w+)(?:\(.*\))?", name)
        if dotted is not None:
            module = importlib.import_module("proxy." + dotted[1].replace("/", "."))
            found.append((name, module, dotted[2]))
        elif member is not None and member[1] in CLASSES:
            found.append((name, CLASSES[member[1]], member[2]))
    return found


def test_every_function_the_doc_names_is_defined_there() -> None:
    found = _attributes()
    assert {"services/chat.route", "Turn.park", "store/writes.write_step"} <= {n for n, *_ in found}
    assert [name for name, owner, attr in found if not hasattr(owner, attr)] == []


def test_the_stages_the_doc_lists_are_STAGES_in_order() -> None:
    listed = re.search(r"runs `STAGES` \(([a-z, ]+)\)", DOC)
    assert listed is not None
    assert listed[1].split(", ") == [s.name for s in STAGES]


def test_every_sql_function_the_doc_names_is_in_the_schema() -> None:
    schema = (ROOT / "migrations" / "schema.sql").read_text(encoding="utf-8")
    functions = [name for name in NAMED if re.fullmatch(r"cascade_\w+_v\d+", name)]
    assert "cascade_begin_step_v7" in functions
    assert [f for f in functions if f"FUNCTION public.{f}(" not in schema] == []


def test_every_migration_the_doc_cites_is_shipped() -> None:
    shipped = {p.name[:4] for p in (ROOT / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql")}
    cited = set(re.findall(r"\b(\d{4})\b", " ".join(re.findall(r"migrations? [\d, and]+", DOC))))
    assert {"0016", "0022"} <= cited
    assert cited - shipped == set()


def test_the_import_contract_the_doc_states_is_pyproject_s() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (pure,) = [
        c
        for c in pyproject["tool"]["importlinter"]["contracts"]
        if c["source_modules"] == ["proxy.cascade"]
    ]
    intro = DOC.split("## ")[0]  # the title and the paragraph before the request's path
    stated = set(re.findall(r"`(proxy\.\w+)`", intro)) - {"proxy.config_context"}
    stated |= {m for m in re.findall(r"\b([a-z]+)\b", intro) if m in pure["forbidden_modules"]}
    assert stated == set(pure["forbidden_modules"])


@pytest.mark.parametrize(
    "path", sorted((ROOT / "proxy" / "cascade").glob("*.py")), ids=lambda p: p.name
)
def test_the_core_never_awaits(path: Path) -> None:
    """The doc's "no await", which the import contract alone does not hold the core to."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    asynchronous = (ast.Await, ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith)
    assert [n.lineno for n in ast.walk(tree) if isinstance(n, asynchronous)] == []
