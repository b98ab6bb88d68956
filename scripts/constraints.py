"""Regenerate constraints.txt: the serving dependencies, resolved and pinned (`make constraints`).

The image installs exactly what this file pins before it copies the code, so a code change
reuses that layer and a build months later installs what was tested. Regenerate it whenever
``[project] dependencies`` in pyproject.toml change
(tests/integration/test_deploy_constraints.py fails until then).

What it does: a fresh venv made with the image's Python (the version in the Dockerfile's
``FROM python:X.Y``: wheels and environment markers depend on it), ``pip install`` of
pyproject's dependencies and of the extras the Dockerfile installs with the code (its
``pip install -c … '/src[extra,…]'``; none when it names none), and ``pip freeze`` of that
venv under a header naming the Python and the extras. The project itself is not installed,
so nothing is built in the checkout.

    python3 scripts/constraints.py [--python /path/to/python3.12]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HEADER = """\
# The image's dependencies (pyproject's [project] dependencies and the extras the Dockerfile
# installs) and everything they pull in, pinned; the Dockerfile installs exactly these before
# it copies the code. Do not edit: `make constraints` (scripts/constraints.py) regenerates it.
# Python: {version} (the image's). Extras: {extras}.
"""
SELF = "cascade-proxy"


def image_python_version() -> str:
    """``X.Y`` from the Dockerfile's ``FROM python:X.Y…`` line."""
    text = (ROOT / "Dockerfile").read_text()
    match = re.search(r"^FROM python:(\d+\.\d+)", text, re.MULTILINE)
    if match is None:
        raise SystemExit("Dockerfile: no FROM python:X.Y line to take the Python version from")
    return match[1]


def image_extras() -> list[str]:
    """The extras the Dockerfile installs with the code: ``pip install -c … '/src[a,b]'``."""
    text = (ROOT / "Dockerfile").read_text()
    match = re.search(r"pip install -c \S+ '?/src(?:\[([^\]]*)\])?", text)
    if match is None:
        raise SystemExit("Dockerfile: no `pip install -c <constraints> /src` line")
    return [extra.strip() for extra in (match[1] or "").split(",") if extra.strip()]


def requirements(project: dict[str, Any], extras: list[str]) -> list[str]:
    """The dependencies and those of ``extras``, an extra's ``cascade-proxy[other]`` expanded."""
    out = list(project["dependencies"])
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in project["optional-dependencies"][extra]:
            if match := re.match(rf"{SELF}\[([^\]]+)\]", req):
                todo.extend(name.strip() for name in match[1].split(","))
            else:
                out.append(req)
    return out


def python_version(python: str) -> str | None:
    """``X.Y`` of the interpreter ``python``, or None when it does not run (a pyenv shim of
    a version that is not selected, say)."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(version: str) -> str:
    """The first of ``pythonX.Y`` on PATH and the pyenv builds of X.Y that runs as X.Y."""
    pattern = os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")
    candidates = [shutil.which(f"python{version}"), *sorted(glob.glob(pattern), reverse=True)]
    for python in filter(None, candidates):
        if python_version(python) == version:
            return python
    raise SystemExit(
        f"python{version} (the image's Python) not found on PATH or in ~/.pyenv;"
        f" pass --python /path/to/python{version}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--python", help="the interpreter to resolve with (default: the image's)")
    parser.add_argument("--output", type=Path, default=ROOT / "constraints.txt")
    args = parser.parse_args()
    want = image_python_version()
    python = args.python or find_python(want)
    version = python_version(python)
    if version != want:
        raise SystemExit(f"{python} is Python {version}; the image runs {want}")
    extras = image_extras()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = requirements(project, extras)
    with tempfile.TemporaryDirectory(prefix="cascade-constraints-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        subprocess.run([*pip, "install", "--quiet", *deps], check=True)
        frozen = subprocess.run(
            [*pip, "freeze", "--all", "--exclude", "pip"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    pins = [line for line in frozen.splitlines() if line.strip()]  # pip sorts them by name
    header = HEADER.format(version=version, extras=", ".join(extras) or "none")
    args.output.write_text(header + "\n".join(pins) + "\n")
    sys.stderr.write(f"wrote {len(pins)} pins to {args.output}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
