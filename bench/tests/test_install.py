"""What each make target installs, and that the suite runs without the bench extra.

`make test` installs the test extra only, so every bench module a test imports must import
without matplotlib, psutil, the floor's clients or LiteLLM; `make run` installs serving and
the embedded PostgreSQL only.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# httpx2 is not here: openai (in the test extra) imports it.
BENCH_ONLY = ("matplotlib", "psutil", "aiohttp", "httpx_aiohttp", "litellm")
# Every bench module a test imports (bench/tests and tests/).
IMPORTED_BY_TESTS = (
    "bench.common",
    "bench.cost",
    "bench.fake_upstream",
    "bench.growth",
    "bench.growth_report",
    "bench.growth_scenario",
    "bench.json_speed",
    "bench.litellm_env",
    "bench.loadgen",
    "bench.loadgen_client",
    "bench.loadgen_workload",
    "bench.overhead",
    "bench.overhead_report",
    "bench.overhead_rounds",
    "bench.policies",
    "bench.raw_pages",
    "bench.redaction_speed",
    "bench.replay",
    "bench.replay_driver",
    "bench.replay_policies",
    "bench.replay_tables",
    "bench.replay_upstream",
    "bench.run",
    "bench.run_checks",
    "bench.run_report",
    "bench.trajectories",
    "bench.trajectory_formats",
)
_IMPORT_WITHOUT = """
import importlib, importlib.abc, sys
blocked = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"blocked: {name}", name=name)
sys.meta_path.insert(0, Block())
for module in sys.argv[2:]:
    importlib.import_module(module)
"""


def _import_without(
    blocked: tuple[str, ...], modules: tuple[str, ...]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _IMPORT_WITHOUT, ",".join(blocked), *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bench_modules_the_tests_import_need_no_bench_extra() -> None:
    done = _import_without(BENCH_ONLY, IMPORTED_BY_TESTS)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_import_check_does_block_the_bench_extra() -> None:
    done = _import_without(BENCH_ONLY, ("bench.common", "psutil"))
    assert done.returncode != 0 and "blocked: psutil" in done.stderr


def _names(requirements: list[str]) -> set[str]:
    out = set()
    for req in requirements:
        name = req.split(";")[0]
        for stop in "[<>=!~ ":
            name = name.split(stop)[0]
        out.add(name.strip().lower().replace("_", "-"))
    return out


def test_serving_and_the_test_extra_leave_the_bench_dependencies_out() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert not {"matplotlib", "litellm"} & _names(project["dependencies"])
    assert not {"matplotlib", "psutil", "litellm"} & _names(extras["test"])
    assert {"matplotlib", "psutil", "aiohttp", "httpx-aiohttp"} <= _names(extras["bench"])
    assert "litellm" not in _names(extras["bench"])  # its own venv, bench/litellm_env.py


def test_the_bench_extra_pins_py_spy() -> None:
    """bench/profile.py runs the py-spy beside the venv's Python, which only an install
    brings: `make bench` installs it with the bench extra, at one version."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bench = extras["optional-dependencies"]["bench"]
    assert any(r.replace(" ", "").startswith("py-spy==") for r in bench), bench


def _make_n(venv: Path, target: str) -> str:
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), f"VENV={venv}", target],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize(
    ("target", "install"),
    [
        ("run", "pip install --quiet -e '.[embedded]'\n"),
        ("test", "pip install --quiet -e '.[test]'\n"),
        ("bench-test", "pip install --quiet -e '.[test,bench]'\n"),
        ("bench", "pip install --quiet -e '.[test,bench]'\n"),
    ],
)
def test_each_target_installs_its_own_extras(tmp_path: Path, target: str, install: str) -> None:
    plan = _make_n(tmp_path / "venv", target)
    assert "-m venv" in plan
    assert install in plan
    assert plan.count("pip install --quiet -e") == 1


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_switching_targets_installs_only_the_difference(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").touch()
    (venv / ".installed-test").touch()  # newer than pyproject.toml: `make test` ran
    assert "pip install" not in _make_n(venv, "test")
    plan = _make_n(venv, "bench-test")
    assert "-m venv" not in plan
    assert "pip install --quiet -e '.[test,bench]'" in plan
    assert "pytest bench/tests" in plan
