"""Issue 24's capacity scenario: many slow streams on one replica with a small pool.

``python -m bench.capacity [--sessions 200] [--pool 10] [--answer-seconds 5] [--rounds 3]
[--pause 6] [--spread 0] [--workers 1] [--floor-workers 1] [--profile DIR]
[--out bench/reports/capacity.json]``

One Cascade replica (``cascade-proxy serve``, ``CASCADE_POOL_MAX_SIZE=--pool``) on an embedded
PostgreSQL, and the floor (``bench.floor``: FastAPI + one httpx client, relaying bytes), each
in front of the same fake upstream (``bench.fake_upstream``) whose streamed answer takes
``--answer-seconds`` (50 chunks spaced evenly, the first at once). Each round sends one
streamed request on each of ``--sessions`` sessions, all at once (a burst) or, with ``--spread
S``, their starts spaced evenly over S seconds (with S the answer's length, the steady state of
that many agents, each asking again as its answer ends), and waits for every answer; a round
after the first extends each session's history by the answer and a new user turn (an agent's
next step: the common path, two statements; a new session's one message is stored by the
statement that takes its lease, so round 1 also runs one statement before the answer). The
floor takes the same rounds. Rounds are ``--pause`` seconds apart, longer than uvicorn's 5 s
keep-alive: every relay's idle connections to the fake upstream are closed before the next
burst, so no relay races a closing keep-alive connection (the floor's httpx client answered
those with a 500).

Measured per target and round: the requests that succeeded, the 503 ``server_busy`` ones, time
to first content chunk (TTFC; p50/p99, from the request's send), the round's wall time, and the
CPU each request cost over the round (ms: the server's process tree, for Cascade its
PostgreSQL's apart, and this load generator's own), with the load average at the round's start:
on a machine shared with other work the figures are the machine's too. For Cascade, a sampler
polls ``pg_stat_activity`` every 20 ms during the rounds: the most connections the replica had
open at once, its pool's apart from the event bus's listening connection. The verdict compares
Cascade's TTFC p99 with the floor's in the same run (the issue's bar: within the floor's + 50
ms), and the pool's peak with ``--pool``. With ``--profile DIR``, py-spy samples the Cascade
replica during each of its rounds into ``DIR/cascade-round-N.txt`` (``bench.profile``): where a
round's CPU goes, the first burst after a start against an extending one. A profiled run's TTFC
is not comparable.
With ``--workers N`` the replica is uvicorn's N worker processes of
``proxy.app:create_app`` (``--factory``, ``PROMETHEUS_MULTIPROC_DIR`` set), each with a pool of
``--pool // N`` on the one database, so the replica's connections stay within ``--pool``; the
rounds start once every worker's event bus listens. ``--floor-workers M`` runs the floor as M
uvicorn workers the same way (``bench.procs.floor_app``); by default it is one process, so a
comparison of N workers against it says so. The CPU figures cover every worker.
Everything binds 127.0.0.1 and stops by itself (each round within ``answer + 60`` s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.common import clean, emit, free_port, machine, percentile
from bench.loadgen_client import Conn, request
from bench.procs import FLOOR_UPSTREAM, cpu, spawn, stop, wait_ready
from bench.profile import py_spy

__all__ = ["main", "run"]

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
CASCADE_BIN = Path(PY).with_name("cascade-proxy")
CHUNKS = 50
BAR_MS = 50.0  # the allowance over the floor's TTFC p99


async def _one(
    base: str, session: str, messages: list[dict[str, str]], delay: float = 0.0
) -> dict[str, Any]:
    """One streamed request on its own connection (loadgen's HTTP/1.1 client: a few dozen
    lines over asyncio streams, cheaper than any client library on the cores the servers
    share): its status, TTFC (ms, to the first SSE data frame) and the answer."""
    await asyncio.sleep(delay)
    parts = urlsplit(base)
    conn = Conn(parts.hostname or "127.0.0.1", parts.port or 80)
    body = json.dumps({"model": "bench-model", "stream": True, "messages": messages}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {conn.host}:{conn.port}\r\n"
        "Content-Type: application/json\r\nAuthorization: Bearer sk-bench\r\n"
        f"X-Session-Id: {session}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    try:
        sample, reply = await request(conn, head, body, True)
    except (OSError, asyncio.IncompleteReadError, ValueError, LookupError) as exc:
        return {"ok": False, "code": type(exc).__name__}
    finally:
        conn.drop()
    if reply is None:
        return {"ok": False, "code": "server_busy" if sample.status == 503 else str(sample.status)}
    return {"ok": True, "code": "200", "ttfc_ms": sample.ttfc * 1000, "text": reply["content"]}


async def _rounds(
    base: str,
    sessions: int,
    rounds: int,
    timeout: float,
    pause: float,
    spread: float,
    cpu: Any = None,
    profile: tuple[int, Path] | None = None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    histories = {f"cap-{i}": [{"role": "user", "content": f"task {i}"}] for i in range(sessions)}
    for n in range(rounds):
        if n:
            await asyncio.sleep(pause)
        load = os.getloadavg()[0]
        spy = py_spy(profile[0], profile[1] / f"cascade-round-{n + 1}.txt") if profile else None
        with spy or contextlib.nullcontext():
            before = cpu() if cpu else None
            started = time.perf_counter()
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(
                        _one(base, s, h, i * spread / sessions)
                        for i, (s, h) in enumerate(histories.items())
                    )
                ),
                timeout + spread,
            )
            wall = time.perf_counter() - started
            spent = (
                {k: (v - before[k]) * 1000 / sessions for k, v in cpu().items()} if before else {}
            )
        ok = [r for r in results if r["ok"]]
        ttfc = [r["ttfc_ms"] for r in ok]
        # When the slowest first chunks came (their start in the round, s): together, a
        # stall; scattered, contention for the CPU.
        slowest = sorted(
            ((i * spread / sessions, r["ttfc_ms"]) for i, r in enumerate(results) if r["ok"]),
            key=lambda x: -x[1],
        )[:5]
        out.append(
            {
                "round": n + 1,
                "requests": sessions,
                "ok": len(ok),
                "server_busy": sum(1 for r in results if r["code"] == "server_busy"),
                "errors": sorted({r["code"] for r in results} - {"200"}),
                "ttfc_p50_ms": round(percentile(ttfc, 50), 1) if ttfc else None,
                "ttfc_p99_ms": round(percentile(ttfc, 99), 1) if ttfc else None,
                "wall_s": round(wall, 2),
                "ttfc_slowest": [[round(t, 2), round(ms, 1)] for t, ms in slowest],
                "load_average": round(load, 2),
                "cpu_ms_per_req": round(spent["server"], 2) if spent else None,
                "db_cpu_ms_per_req": round(spent["db"], 2) if spent and spent["db"] else None,
                "loadgen_cpu_ms_per_req": round(spent["loadgen"], 2) if spent else None,
            }
        )
        for history, result in zip(histories.values(), results, strict=True):
            if result["ok"]:
                history += [
                    {"role": "assistant", "content": result["text"]},
                    {"role": "user", "content": f"step {n + 2}"},
                ]
    return out


async def _sample(dsn: str, stop: asyncio.Event, peaks: dict[str, int]) -> None:
    """The most client connections on the bench's database at once (the sampler's own
    aside), and of those the most that were not the bus's LISTEN connection."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    sql = """
    SELECT count(*), count(*) FILTER (WHERE query NOT LIKE 'LISTEN%')
    FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND backend_type = 'client backend'
    """
    try:
        while not stop.is_set():
            total, pooled = await conn.fetchrow(sql)
            peaks["total"] = max(peaks["total"], total)
            peaks["pool"] = max(peaks["pool"], pooled)
            await asyncio.sleep(0.02)
    finally:
        await conn.close()


async def _measure(
    base: str,
    args: argparse.Namespace,
    dsn: str | None,
    cpu: Any = None,
    profile: tuple[int, Path] | None = None,
) -> tuple[list[dict], dict[str, int]]:
    peaks = {"total": 0, "pool": 0}
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample(dsn, stop, peaks)) if dsn else None
    try:
        rounds = await _rounds(
            base,
            args.sessions,
            args.rounds,
            args.answer_seconds + 60,
            args.pause,
            args.spread,
            cpu,
            profile,
        )
    finally:
        stop.set()
        if sampler is not None:
            await sampler
    return rounds, peaks


def _loop(coro: Any) -> Any:
    """``asyncio.run``, on uvloop when installed (as loadgen runs)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _floor_cmd(workers: int, port: int, upstream: str) -> list[str]:
    """The floor: ``bench.floor`` in one process, or uvicorn's ``workers`` processes of it
    (``bench.procs.floor_app``, whose upstream is ``$BENCH_FLOOR_UPSTREAM``)."""
    if workers == 1:
        return [PY, "-m", "bench.floor", "--port", str(port), "--upstream", upstream]
    return [PY, "-m", "uvicorn", "bench.procs:floor_app", "--factory", "--workers", str(workers),
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
            "--no-access-log", "--backlog", "4096"]  # fmt: skip


def _cascade_cmd(
    args: argparse.Namespace, port: int, config: Path, dsn: str, tmp: Path
) -> tuple[list[str], dict[str, str]]:
    """The replica: ``cascade-proxy serve`` with one worker; with more, uvicorn's workers of
    ``proxy.app:create_app`` (README, Metrics), each with ``--pool // --workers``
    connections, so the replica's pool stays within ``--pool``."""
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "CASCADE_LOG_LEVEL": "warning",
        "CASCADE_POOL_MAX_SIZE": str(max(1, args.pool // args.workers)),
        "CASCADE_CONFIG": str(config),
    }
    if args.workers == 1:
        cmd = [str(CASCADE_BIN), "serve", "--host", "127.0.0.1", "--port", str(port)]
        return cmd, env
    metrics = tmp / "metrics"
    metrics.mkdir()
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)
    cmd = [PY, "-m", "uvicorn", "proxy.app:create_app", "--factory", "--workers",
           str(args.workers), "--host", "127.0.0.1", "--port", str(port), "--log-level",
           "warning", "--no-access-log"]  # fmt: skip
    return cmd, env


async def _workers_up(dsn: str, workers: int, timeout: float = 60.0) -> None:
    """Until ``workers`` event buses LISTEN on the database: each worker's start-up opens
    one before its warm-up, and ``/readyz`` answers as soon as one worker serves."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    sql = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
    try:
        deadline = time.monotonic() + timeout
        while await conn.fetchval(sql) < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{workers} workers did not all start")
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    from proxy.pgembed import start_embedded

    tmp = Path(tempfile.mkdtemp(prefix="cascade-capacity-"))
    procs: list[subprocess.Popen[bytes]] = []
    dsn, server = start_embedded(tmp / "pg")
    try:
        fake_port, floor_port, cascade_port = free_port(), free_port(), free_port()
        delay_ms = args.answer_seconds * 1000 / (CHUNKS - 1)
        fake = spawn(
            [PY, "-m", "bench.fake_upstream", "--port", str(fake_port), "--chunks", str(CHUNKS),
             "--chunk-delay-ms", f"{delay_ms:.1f}"],
            tmp / "fake.log",
        )  # fmt: skip
        procs.append(fake)
        upstream = f"http://127.0.0.1:{fake_port}"
        floor = spawn(_floor_cmd(args.floor_workers, floor_port, upstream), tmp / "floor.log",
                      {**os.environ, FLOOR_UPSTREAM: upstream})  # fmt: skip
        procs.append(floor)
        config = tmp / "agents.json"
        config.write_text(
            json.dumps(
                {
                    "providers": {"openai": {"baseUrl": f"{upstream}/v1"}},
                    "models": {"default": {"contextLimit": 128000}},
                    "agents": {"default": {"provider": "openai"}},
                }
            )
        )
        cmd, env = _cascade_cmd(args, cascade_port, config, dsn, tmp)
        cascade = spawn(cmd, tmp / "cascade.log", env)
        procs.append(cascade)
        wait_ready(f"{upstream}/v1/models", fake)
        wait_ready(f"http://127.0.0.1:{floor_port}/v1/models", floor)
        wait_ready(f"http://127.0.0.1:{cascade_port}/readyz", cascade)
        asyncio.run(_workers_up(dsn, args.workers))
        if max(args.workers, args.floor_workers) > 1:
            time.sleep(3)  # every worker past its start-up (Cascade's: its pool's warm-up)
        floor_cpu = functools.partial(cpu, floor.pid, None)
        cascade_cpu = functools.partial(cpu, cascade.pid, str(tmp / "pg"))
        floor_rounds, _ = asyncio.run(
            _measure(f"http://127.0.0.1:{floor_port}", args, None, floor_cpu)
        )
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
        profile = None if args.profile is None else (cascade.pid, args.profile)
        cascade_rounds, peaks = asyncio.run(
            _measure(f"http://127.0.0.1:{cascade_port}", args, dsn, cascade_cpu, profile)
        )
    finally:
        for p in reversed(procs):
            stop(p)
        server.cleanup()
    verdict = []
    for f, c in zip(floor_rounds, cascade_rounds, strict=True):
        over = (c["ttfc_p99_ms"] or float("nan")) - (f["ttfc_p99_ms"] or float("nan"))
        verdict.append(
            {
                "round": c["round"],
                "all_ok": c["ok"] == c["requests"] and c["server_busy"] == 0,
                "ttfc_p99_over_floor_ms": round(over, 1),
                "ttfc_p99_ratio": round(c["ttfc_p99_ms"] / f["ttfc_p99_ms"], 2)
                if c["ttfc_p99_ms"] and f["ttfc_p99_ms"]
                else None,
                "within_bar": over <= BAR_MS,
            }
        )
    return clean(
        {
            "machine": machine(),
            "sessions": args.sessions,
            "pool": args.pool,
            "workers": args.workers,
            "floor_workers": args.floor_workers,
            "answer_seconds": args.answer_seconds,
            "spread_seconds": args.spread,
            "floor": floor_rounds,
            "cascade": cascade_rounds,
            "cascade_connections_peak": peaks["total"],
            "cascade_pool_connections_peak": peaks["pool"],
            "pool_within_size": peaks["pool"] <= args.pool,
            "verdict": verdict,
        }
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--pool", type=int, default=10)
    parser.add_argument("--answer-seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause", type=float, default=6.0)
    parser.add_argument("--spread", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--floor-workers", type=int, default=1)
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.profile is not None and args.workers > 1:
        parser.error("--profile samples one process: use it with --workers 1")
    emit(run(args), args.out, "capacity.json")


if __name__ == "__main__":
    main()
