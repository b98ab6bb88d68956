"""py-spy around a block of a benchmark: where a server process's CPU went in that block.

``py_spy(pid, out)`` samples ``pid`` (native frames too) while the block runs and writes
py-spy's raw collapsed stacks to ``out``, one ``frame;frame;... count`` line each (the format
flame-graph tools read; ``grep`` and a few lines of Python sum them by frame). py-spy stops
the process for each native sample, so the timings of a profiled run are not the process's
own: profile one run, measure in another.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PY_SPY", "py_spy"]

PY_SPY = Path(sys.executable).with_name("py-spy")


@contextlib.contextmanager
def py_spy(pid: int, out: Path, *, rate: int = 50, spy: Path = PY_SPY) -> Iterator[None]:
    """``spy`` sampling ``pid`` ``rate`` times a second for the block; its stacks to ``out``
    (written when it is interrupted, at the block's end)."""
    if not spy.exists():
        raise RuntimeError(f"profiling needs py-spy beside {sys.executable}: pip install py-spy")
    cmd = [str(spy), "record", "--native", "--format", "raw", "--rate", str(rate),
           "--pid", str(pid), "-o", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached before the block's work starts
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
