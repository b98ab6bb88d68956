"""LiteLLM is compared at one pinned version, and the results say which."""

from __future__ import annotations

import stat
from pathlib import Path

from bench import litellm_env
from bench.overhead_report import render_markdown, versions_line
from bench.run_report import render_results

# A venv stand-in: `python -m pip install X` records X and installs the pinned version;
# any other call is the version probe and prints what is installed (fails when nothing is).
_PYTHON = """#!/bin/sh
root="$(dirname "$0")/.."
if [ "$1 $2 $3" = "-m pip install" ]; then
  echo "$*" >> "$root/pip.log"
  echo "$PINNED" > "$root/version"
  exit 0
fi
[ -f "$root/version" ] && cat "$root/version"
"""


def _venv(tmp_path: Path, installed: str, pip_installs: str = litellm_env.VERSION) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(_PYTHON.replace("$PINNED", pip_installs))
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    (venv / "bin" / "litellm").touch()
    if installed:
        (venv / "version").write_text(installed + "\n")
    return venv


def test_the_pin_is_the_version_behind_the_issue_figures() -> None:
    assert litellm_env.REQUIREMENT == "litellm[proxy]==1.108.7"


def test_a_venv_at_the_pinned_version_is_used_as_it_is(tmp_path: Path) -> None:
    venv = _venv(tmp_path, litellm_env.VERSION)
    env = litellm_env.ensure(venv=venv)
    assert env.available and env.version == litellm_env.VERSION
    assert not (venv / "pip.log").exists()


def test_another_version_is_replaced_by_the_pin(tmp_path: Path) -> None:
    venv = _venv(tmp_path, "1.110.2")
    env = litellm_env.ensure(venv=venv)
    assert env.available and env.version == litellm_env.VERSION
    assert "install --quiet litellm[proxy]==1.108.7" in (venv / "pip.log").read_text()


def test_another_version_is_refused_when_installing_is_off(tmp_path: Path) -> None:
    env = litellm_env.ensure(install=False, venv=_venv(tmp_path, "1.110.2"))
    assert not env.available
    assert "has litellm 1.110.2, the bench pins 1.108.7" in env.reason


def test_an_install_that_misses_the_pin_is_reported(tmp_path: Path) -> None:
    env = litellm_env.ensure(venv=_venv(tmp_path, "", pip_installs="1.110.2"))
    assert not env.available
    assert env.reason == "pip installed litellm 1.110.2, not 1.108.7"


def test_the_versions_line_names_litellm_first_and_drops_the_unmeasured() -> None:
    line = versions_line({"httpx": "0.28.1", "litellm": "1.108.7", "aiohttp": "", "fastapi": "1"})
    assert line == "Versions: litellm 1.108.7, fastapi 1, httpx 0.28.1."
    assert versions_line({"litellm": ""}) == ""


def _overhead_result() -> dict:
    return {
        "meta": {"targets": [], "command": "python -m bench.overhead", "when": "now",
                 "machine": "box", "python": "3.11", "rounds": 1, "window_s": 3,
                 "warmup_s": 0.5, "chunk_delay_ms": 2.0, "floor": "floor",
                 "load_average_at_start": [0.1], "load_average_at_end": [0.2],
                 "scenarios": {}, "versions": {"litellm": "1.108.7", "httpx": "0.28.1"}},
        "unavailable": {}, "targets": [], "rows": {}, "resources": {}, "round_ratios": {},
    }  # fmt: skip


def test_the_overhead_report_and_the_results_name_the_litellm_version() -> None:
    result = _overhead_result()
    assert "Versions: litellm 1.108.7, httpx 0.28.1." in render_markdown(result)
    meta = {"command": "python -m bench.run", "when": "today", "machine": "box", "nproc": 2,
            "load_start": [1.0], "load_end": [2.0], "commit": "abc", "python": "3.11",
            "wall_s": 120.0, "quick": False}  # fmt: skip
    parts = {"overhead": {"command": "python -m bench.overhead", "seconds": 6.0, "ok": True,
                          "data": result}}  # fmt: skip
    assert "Versions: litellm 1.108.7, httpx 0.28.1." in render_results(
        meta=meta, parts=parts, charts={}
    )
