"""The overhead benchmark's targets: starting each server, charging it its processes, stopping it.

A :class:`Target` is one thing the load generator can hit (the fake upstream itself, a floor
variant, Cascade on a fresh embedded PostgreSQL, LiteLLM from its own venv) and the processes
whose CPU and memory are charged to it; :func:`start_target` starts one in its own process and
reports it unavailable, with its reason, when it cannot.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import litellm_env, procs
from bench.common import free_port

if TYPE_CHECKING:  # the bench extra installs psutil; importing this module needs none
    import psutil

__all__ = [
    "ROOT",
    "PY",
    "CASCADE_POOL",
    "Target",
    "cpu_seconds",
    "rss_mb",
    "hwm_mb",
    "wait_ready",
    "spawn",
    "start_target",
    "stop_target",
]

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
CASCADE_BIN = Path(PY).parent / "cascade-proxy"
# Connections the Cascade under test may hold. Every request in flight holds one (README:
# Capacity), so the default of 64 lets c=32 open 32 backends, and on a 2-core machine those
# backends cost PostgreSQL CPU and RPS of their own (docs/perf.md). The fake answers at
# once, so 10 connections serve every scenario here, and every run is comparable with the
# earlier ones, which had 10.
CASCADE_POOL = 10


@dataclass(slots=True)
class Target:
    """One thing the load generator can hit, and the processes whose cost is charged to it."""

    name: str
    url: str = ""
    proc: subprocess.Popen[bytes] | None = None
    db_marker: str = ""
    unavailable: str = ""
    version: str = ""
    peak_rss_mb: float = 0.0
    peak_db_rss_mb: float = 0.0
    extra_pids: set[int] = field(default_factory=set)

    def processes(self) -> tuple[list[psutil.Process], list[psutil.Process]]:
        """(the proxy's own processes, its database's) — alive ones only.

        The database is the postmaster whose command line names ``db_marker`` (its data
        directory) plus its backends, wherever the embedded server was parented."""
        import psutil

        if self.proc is None:
            return [], []
        try:
            root = psutil.Process(self.proc.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return [], []
        db: dict[int, psutil.Process] = {}
        if self.db_marker:
            for post in psutil.process_iter():
                if _is_db(post, self.db_marker):
                    self.extra_pids.add(post.pid)
                    with contextlib.suppress(psutil.Error):
                        db.update({q.pid: q for q in (post, *post.children(recursive=True))})
        return [p for p in tree if p.pid not in db], list(db.values())


def _is_db(proc: psutil.Process, marker: str) -> bool:
    import psutil

    with contextlib.suppress(psutil.Error):
        return marker in " ".join(proc.cmdline())
    return False


def cpu_seconds(procs: list[psutil.Process]) -> float:
    import psutil

    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def rss_mb(procs: list[psutil.Process]) -> float:
    import psutil

    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 2**20


def hwm_mb(pid: int) -> float:
    """Peak RSS (VmHWM) the kernel recorded for ``pid``; 0 when it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


# ----------------------------------------------------------------------------- processes


def wait_ready(url: str, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return True
        time.sleep(0.25)
    return False


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            env=env,
            start_new_session=True,
        )


def stop_target(target: Target) -> None:
    import psutil

    if target.proc is not None:
        procs.stop(target.proc)
    for pid in target.extra_pids:  # an embedded PostgreSQL the proxy failed to stop
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if target.db_marker and _is_db(p, target.db_marker):
                p.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
                p.wait(timeout=10)


def _cascade_config(upstream: str) -> dict[str, Any]:
    return {
        "providers": {"openai": {"baseUrl": upstream, "apiKeyEnv": "OPENAI_API_KEY"}},
        "models": {"default": {"contextLimit": 128000}},
        "agents": {"default": {"provider": "openai", "fastModel": "bench-model"}},
    }


def start_target(name: str, fake: str, logs: Path, tmp: Path, key: str) -> Target:
    target = Target(name)
    port = free_port()
    target.url = f"http://127.0.0.1:{port}"
    log = logs / f"{name}.log"
    if name.startswith("floor"):
        client = name.removeprefix("floor").removeprefix("-") or "httpx"
        cmd = [PY, "-m", "bench.floor", "--port", str(port), "--upstream", fake, "--client", client]
        target.proc = spawn(cmd, log)
        ready, timeout = f"{target.url}/v1/models", 30.0
    elif name == "cascade":
        if not CASCADE_BIN.exists():
            target.unavailable = f"{CASCADE_BIN} not found"
            return target
        data = tmp / "cascade-data"
        config = tmp / "cascade-agents.json"
        config.write_text(json.dumps(_cascade_config(f"{fake}/v1")))
        env = {
            **os.environ,
            "OPENAI_BASE_URL": f"{fake}/v1",
            "OPENAI_API_KEY": "x",
            "CASCADE_DATA_DIR": str(data),
            "CASCADE_LOG_LEVEL": "warning",
            "CASCADE_POOL_MAX_SIZE": str(CASCADE_POOL),
        }
        env.pop("DATABASE_URL", None)
        target.db_marker = str(data)
        cmd = [str(CASCADE_BIN), *f"serve --host 127.0.0.1 --port {port} --config".split()]
        cmd.append(str(config))
        target.proc = spawn(cmd, log, env)
        ready, timeout = f"{target.url}/readyz", 180.0
    elif name == "litellm":
        env_info = litellm_env.ensure()
        if not env_info.available:
            target.unavailable = env_info.reason
            return target
        target.version = env_info.version
        with log.open("wb") as out:
            target.proc = litellm_env.start(
                env_info, port=port, upstream=f"{fake}/v1", master_key=key, log=out
            )
        ready, timeout = f"{target.url}/health/liveliness", 120.0
    else:
        raise ValueError(f"unknown target {name!r}")
    if not wait_ready(ready, target.proc, timeout):
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        target.unavailable = f"did not become ready at {ready}: {' | '.join(tail)[:400]}"
        stop_target(target)
    return target
