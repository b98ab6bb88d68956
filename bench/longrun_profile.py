"""``bench.longrun --profile FILE``: cProfile in the proxy process over the run's last steps.

The proxy is started with a ``sitecustomize`` on its ``PYTHONPATH`` that installs two signal
handlers: SIGUSR1 starts a profiler on the main thread (the event loop's, where requests
run), SIGUSR2 stops it and writes its stats to ``FILE``, and the time the garbage collector
took meanwhile, by generation, to ``FILE.gc`` (a collection's cost lands on whatever code
allocated when it ran, so the profile alone cannot show it). Only what runs on that thread is
profiled; PostgreSQL's share is in the run's ``pg_ms`` column.
"""

from __future__ import annotations

import ast
import os
import pstats
import signal
import tempfile
import time
from pathlib import Path

__all__ = ["install", "start", "stop_and_print", "window"]

_SITECUSTOMIZE = """
import cProfile, gc, os, signal, time
_out = os.environ.get("CASCADE_BENCH_PROFILE")
if _out:
    _prof = cProfile.Profile()
    _gc = {"on": False, "t0": 0.0, "by": [[0, 0.0], [0, 0.0], [0, 0.0]]}

    def _collect(phase, info):
        if not _gc["on"]:
            return
        if phase == "start":
            _gc["t0"] = time.perf_counter()
        else:
            row = _gc["by"][info["generation"]]
            row[0] += 1
            row[1] += time.perf_counter() - _gc["t0"]

    gc.callbacks.append(_collect)

    def _start(*_):
        _gc["on"] = True
        _prof.enable()

    signal.signal(signal.SIGUSR1, _start)

    def _stop(*_):
        _prof.disable()
        _gc["on"] = False
        with open(_out + ".gc", "w") as f:
            f.write(repr(_gc["by"]))
        _prof.dump_stats(_out)

    signal.signal(signal.SIGUSR2, _stop)
"""


def window(steps: int, profiled: int) -> tuple[int, int]:
    """(the index of the first profiled step, how many are profiled): the run's last
    ``profiled`` steps, or all of them when it has fewer, so the profiler starts at all and
    the per-request figures divide by the requests it saw."""
    first = max(0, steps - max(1, profiled))
    return first, steps - first


def install(out: str) -> None:
    """Make the proxy this process starts next profilable (its env comes from ours)."""
    folder = Path(tempfile.mkdtemp(prefix="cascade-profile-"))
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    os.environ["CASCADE_BENCH_PROFILE"] = os.path.abspath(out)
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), old) if p)


def start(pid: int) -> None:
    os.kill(pid, signal.SIGUSR1)


def stop_and_print(pid: int, out: str, requests: int, top: int = 30) -> None:
    """Stop the profiler, wait for its file, and print the top costs per request."""
    path = Path(out)
    if path.exists():
        path.unlink()
    os.kill(pid, signal.SIGUSR2)
    for _ in range(100):
        if path.exists() and path.stat().st_size > 0:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    stats = pstats.Stats(str(path))
    gc_path = Path(out + ".gc")
    if gc_path.exists():  # garbage collections by generation: how many, ms per request
        by = ast.literal_eval(gc_path.read_text(encoding="utf-8"))
        print(
            "gc per request:",
            ", ".join(
                f"gen{g} {n / requests:.2f}x {1000 * t / requests:.3f} ms"
                for g, (n, t) in enumerate(by)
            ),
        )
    print(f"profile of the last {requests} requests (ms per request):")
    for key, title in (("tottime", "own time"), ("cumulative", "with callees")):
        print(f"  by {title}:")
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2 if key == "tottime" else 3])
        for (file, line, fn), (_cc, nc, tt, ct, _callers) in rows[:top]:
            where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
            print(
                f"    {1000 * tt / requests:7.3f} {1000 * ct / requests:8.3f} "
                f"{nc / requests:8.1f}  {fn} ({where})"
            )
