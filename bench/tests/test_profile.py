"""bench.profile: py-spy's raw stacks of a process, for a block (bench.capacity --profile)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.profile import PY_SPY, py_spy

SPY = PY_SPY


@pytest.mark.skipif(not SPY.exists(), reason="py-spy is not installed beside this Python")
def test_a_block_is_profiled_into_raw_stacks(tmp_path: Path) -> None:
    busy = "import time\nwhile True:\n    sum(range(10000))\n    time.sleep(0.001)\n"
    proc = subprocess.Popen([sys.executable, "-c", busy])
    try:
        time.sleep(0.3)
        with py_spy(proc.pid, tmp_path / "round.txt"):
            time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait()
    lines = (tmp_path / "round.txt").read_text().splitlines()
    assert lines
    assert all(line.rpartition(" ")[2].isdigit() for line in lines)  # "frame;frame;... count"
    assert any("<module>" in line for line in lines)


def test_without_py_spy_it_says_what_to_install(tmp_path: Path) -> None:
    profile = py_spy(1, tmp_path / "round.txt", spy=tmp_path / "no-py-spy")
    with pytest.raises(RuntimeError, match="pip install py-spy"), profile:
        pass
