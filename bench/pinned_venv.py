"""A tool the benchmarks compare against, in a virtualenv of its own at a pinned version.

LiteLLM (the overhead bench) and Headroom (the replay's reference row) are never
dependencies of Cascade: each lives in a gitignored venv under ``bench/``. :func:`ensure`
installs the pin on first use, and again when the venv holds another version, and reports,
never raises: when the tool cannot be installed (no network, a broken release), the benchmark
records the reason and drops the tool's column.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Pin", "PinnedEnv", "ensure"]


@dataclass(frozen=True, slots=True)
class Pin:
    """What to install: ``requirement`` provides distribution ``dist`` at ``version`` and the
    command ``command``; ``label`` names the tool in reasons."""

    label: str
    dist: str
    version: str
    requirement: str
    command: str
    install_timeout: float


@dataclass(frozen=True, slots=True)
class PinnedEnv:
    """Whether the tool can be run, and if not, why (shown in the results)."""

    available: bool
    reason: str = ""
    executable: str = ""
    version: str = ""


def _version(python: Path, dist: str) -> str:
    probe = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return probe.stdout.strip() if probe.returncode == 0 else ""


def _tail(text: str, lines: int = 8) -> str:
    kept = [ln for ln in text.splitlines() if ln.strip() and "is ignored: it is neither" not in ln]
    return " | ".join(kept[-lines:])


def ensure(pin: Pin, *, install: bool, venv: Path) -> PinnedEnv:
    """The venv at ``pin.version``, creating it or installing the pin when it is not."""
    python = venv / "bin" / "python"
    executable = venv / "bin" / pin.command
    found = _version(python, pin.dist) if executable.exists() else ""
    if found == pin.version:
        return PinnedEnv(True, executable=str(executable), version=found)
    if not install:
        has = (
            f"has {pin.dist} {found}, the bench pins {pin.version}"
            if found
            else f"has no {pin.label}"
        )
        return PinnedEnv(False, reason=f"{venv} {has} (run with --install)")
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", pin.requirement],
            capture_output=True,
            text=True,
            timeout=pin.install_timeout,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return PinnedEnv(False, reason=f"could not create the {pin.label} venv: {exc}")
    if pip.returncode != 0:
        return PinnedEnv(False, reason=f"pip install {pin.requirement} failed: {_tail(pip.stderr)}")
    version = _version(python, pin.dist)
    if not executable.exists() or not version:
        return PinnedEnv(False, reason=f"{pin.dist} installed but its CLI is missing")
    if version != pin.version:
        return PinnedEnv(False, reason=f"pip installed {pin.dist} {version}, not {pin.version}")
    return PinnedEnv(True, executable=str(executable), version=version)
