"""``bench.longrun --profile``: a process started after ``install`` profiles itself between
SIGUSR1 and SIGUSR2, and the stats are printed per request."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import longrun_profile

CHILD = """
import os, signal, sys, time
os.kill(os.getpid(), signal.SIGUSR1)
def busy_work():
    return sum(i * i for i in range(20000))
for _ in range(50):
    busy_work()
os.kill(os.getpid(), signal.SIGUSR2)
open(sys.argv[1], "w").close()
time.sleep(30)
"""


def test_the_started_process_profiles_between_the_signals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # install changes both
    monkeypatch.setenv("CASCADE_BENCH_PROFILE", "")
    out = str(tmp_path / "p.prof")
    longrun_profile.install(out)
    done = tmp_path / "done"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(done)], env=dict(os.environ))
    try:
        for _ in range(100):
            if done.exists():
                break
            time.sleep(0.05)
        assert Path(out).exists() and Path(out + ".gc").exists()
        longrun_profile.stop_and_print(child.pid, out, requests=50)
    finally:
        child.kill()
        child.wait()
    printed = capsys.readouterr().out
    assert "gc per request:" in printed
    assert "busy_work" in printed


def test_a_run_shorter_than_the_profiled_steps_is_profiled_whole() -> None:
    assert longrun_profile.window(4000, 200) == (3800, 200)
    assert longrun_profile.window(120, 200) == (0, 120)  # it started at step -80: never
    assert longrun_profile.window(120, 0) == (119, 1)
