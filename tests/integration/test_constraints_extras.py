"""constraints.txt pins what a serving dependency's extras pull in (``httpx[brotli,zstd]``:
brotli and zstandard), not only the dependency itself: an extra added to a dependency whose
pin still fits would otherwise pass test_deploy_constraints.py's check, and the image would install
the extra's packages unpinned, after the pinned layer."""

from __future__ import annotations

from importlib.metadata import requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.integration.test_deploy_constraints import (
    _project,
    image_extras,
    image_requirements,
    pins,
)

ROOT = Path(__file__).resolve().parents[2]


def extra_packages(text: str) -> list[str]:
    """The distributions the extras of the requirement ``text`` add, as the installed
    distribution declares them (markers evaluated on this machine: Linux, CPython)."""
    req = Requirement(text)
    if not req.extras:
        return []
    out = []
    for line in requires(req.name) or []:
        dep = Requirement(line)
        marker = dep.marker
        if marker is None or marker.evaluate({"extra": ""}):
            continue  # needed without any extra: pip's resolution, pinned or not
        if any(marker.evaluate({"extra": extra}) for extra in req.extras):
            out.append(canonicalize_name(dep.name))
    return out


def unpinned_extras(dependencies: list[str], pinned: dict[str, Version]) -> list[str]:
    return [
        f"{name} (for {text})"
        for text in dependencies
        for name in extra_packages(text)
        if name not in pinned
    ]


def test_constraints_pin_what_each_dependency_s_extras_pull_in() -> None:
    pinned = pins((ROOT / "constraints.txt").read_text())
    missing = unpinned_extras(image_requirements(_project(), image_extras()), pinned)
    assert not missing, "run `make constraints`: not pinned: " + "; ".join(missing)


def test_the_check_catches_an_extra_added_to_a_pinned_dependency() -> None:
    assert sorted(extra_packages("httpx[brotli,zstd]>=0.27.1")) == ["brotli", "zstandard"]
    pinned = {"httpx": Version("0.28.1"), "brotli": Version("1.2.1")}
    assert unpinned_extras(["httpx[brotli,zstd]>=0.27.1", "httpx>=0.27"], pinned) == [
        "zstandard (for httpx[brotli,zstd]>=0.27.1)"
    ]
