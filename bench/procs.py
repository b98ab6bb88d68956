"""The processes of a benchmark that starts servers: start, wait, stop, and their CPU.

``bench.capacity`` starts its servers here (``bench.overhead`` and ``bench.growth`` stop
theirs here too): ``spawn`` puts each in a process group of its
own, so ``stop`` ends a server with every worker it forked (uvicorn's ``--workers``), and
``cpu`` sums the CPU of a server's whole process tree and of its PostgreSQL's. ``floor_app``
is the floor (``bench.floor``) as a uvicorn factory, configured by the environment, so the
floor too can run as several worker processes: uvicorn forks workers only for an app it
can import by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["FLOOR_UPSTREAM", "cpu", "floor_app", "spawn", "stop", "wait_ready"]

ROOT = Path(__file__).resolve().parents[1]
FLOOR_UPSTREAM = "BENCH_FLOOR_UPSTREAM"  # the floor factory's upstream (``floor_app``)


def floor_app() -> Any:
    """``bench.floor``'s app (httpx client) for the upstream in ``$BENCH_FLOOR_UPSTREAM``:
    ``uvicorn bench.procs:floor_app --factory --workers N``."""
    from bench.floor import create_app

    return create_app(os.environ[FLOOR_UPSTREAM])


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``cmd`` in a process group of its own (its workers with it), output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT), env=env,
            start_new_session=True,
        )  # fmt: skip


def stop(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM to ``proc``'s group, SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Until ``url`` answers 200; an error if ``proc`` exits or ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited ({proc.returncode})")
        with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become ready")


def _cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) of the live processes ``pids``."""
    import psutil

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


def _trees(root: int, db_marker: str | None) -> dict[str, list[int]]:
    """The pids of ``root``'s process tree (a uvicorn supervisor's workers included) and,
    with ``db_marker`` (its data directory), those of the PostgreSQL whose postmaster names
    it, with its backends."""
    import psutil

    out: dict[str, list[int]] = {"server": [], "db": []}
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(root)
        out["server"] = [proc.pid, *(c.pid for c in proc.children(recursive=True))]
    if db_marker:
        for post in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if db_marker in " ".join(post.cmdline()):
                    out["db"] += [post.pid, *(c.pid for c in post.children(recursive=True))]
    return out


def cpu(root: int, db_marker: str | None) -> dict[str, float]:
    """CPU seconds so far: ``root``'s process tree, its PostgreSQL's (``db_marker``), and
    this process's own (the load generator)."""
    trees = _trees(root, db_marker)
    return {
        "server": _cpu_of(trees["server"]),
        "db": _cpu_of(trees["db"]),
        "loadgen": time.process_time(),
    }
