"""The proxy's CPU per relayed stream chunk: Cascade against the floor, long streams.

``python -m bench.stream_chunks [--chunks 1000] [--chunk-delay-ms 1] [--streams 8]
[--rounds 5] [--base DIR] [--profile DIR] [--out FILE]``

A streamed request's CPU is mostly the relay of its chunks once an answer is long: each
chunk passes the provider client, the relay's parse and checks, and the response. This
bench makes the chunks dominate: the fake upstream (``bench.fake_upstream``) answers every
streamed request with ``--chunks`` content chunks ``--chunk-delay-ms`` apart (one chunk per
socket write, so each arrives on its own), and each round sends ``--streams`` streamed
requests at once, each on a new session, to one target at a time. Per target and round: the
server process tree's CPU over the round (psutil, as ``bench.procs.cpu``; PostgreSQL's is
not counted) divided by the data frames the clients got, in microseconds. A request's fixed
cost (its parse, statements and assembly, a few ms) is spread over its chunks: a thousand
chunks make it a few microseconds of each chunk's figure.

Targets, in the same run and alternating (the order rotates each round): ``floor``
(``bench.floor``: httpx + ``StreamingResponse``, nothing parsed), ``cascade`` (this checkout,
``cascade-proxy serve``) and, with ``--base DIR``, ``base``: ``cascade-proxy serve`` of another
checkout of the project (``git worktree add /tmp/relay-base main``), imported from DIR with
this interpreter and its packages. Both Cascades share one embedded PostgreSQL. Reported:
each target's median, min and max per round, and the medians of the per-round ratios
``cascade / floor`` and ``cascade / base``. With ``--profile DIR`` py-spy (``bench.profile``)
samples the ``cascade`` target during its rounds into ``DIR/stream-chunks-N.txt``; a profiled
run's CPU is not comparable. Everything binds 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.common import clean, emit, free_port, machine
from bench.loadgen_client import Conn, request
from bench.procs import cpu, spawn, stop, wait_ready
from bench.profile import PY_SPY, py_spy

__all__ = ["main", "run"]

PY = sys.executable
CASCADE_BIN = Path(PY).with_name("cascade-proxy")


async def _one(base: str, session: str) -> tuple[int, int]:
    """One streamed request on its own connection: (HTTP status, data frames received)."""
    parts = urlsplit(base)
    conn = Conn(parts.hostname or "127.0.0.1", parts.port or 80)
    messages = [{"role": "user", "content": f"stream {session}"}]
    body = json.dumps({"model": "bench-model", "stream": True, "messages": messages}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {conn.host}:{conn.port}\r\n"
        "Content-Type: application/json\r\nAuthorization: Bearer sk-bench\r\n"
        f"X-Session-Id: {session}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    try:
        sample, _ = await request(conn, head, body, True)
    finally:
        conn.drop()
    return sample.status, sample.frames


async def _round(base: str, prefix: str, streams: int, timeout: float) -> tuple[list[int], int]:
    results = await asyncio.wait_for(
        asyncio.gather(*(_one(base, f"{prefix}-{i}") for i in range(streams))), timeout
    )
    return [status for status, _ in results], sum(frames for _, frames in results)


def _measure(name: str, base: str, pid: int, args: argparse.Namespace, n: int) -> dict[str, Any]:
    timeout = 60 + args.chunks * (args.chunk_delay_ms / 1000 + 0.002)
    spy = None
    if args.profile is not None and name == "cascade":
        spy = py_spy(pid, args.profile / f"stream-chunks-{n}.txt", rate=500, spy=args.py_spy)
    with spy or contextlib.nullcontext():
        before = cpu(pid, None)["server"]
        started = time.perf_counter()
        statuses, frames = asyncio.run(_round(base, f"sc-{name}-{n}", args.streams, timeout))
        wall = time.perf_counter() - started
        spent = cpu(pid, None)["server"] - before
    return {
        "round": n,
        "statuses": sorted(set(statuses)),
        "frames": frames,
        "wall_s": round(wall, 2),
        "cpu_us_per_chunk": round(spent * 1e6 / frames, 2) if frames else None,
        "load_average": round(os.getloadavg()[0], 2),
    }


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    values = [r["cpu_us_per_chunk"] for r in rounds if r["cpu_us_per_chunk"] is not None]
    if not values:
        return {}
    return {
        "median_us": round(statistics.median(values), 2),
        "min_us": min(values),
        "max_us": max(values),
    }


def _ratios(per: dict[str, list[dict[str, Any]]], top: str, bottom: str) -> dict[str, Any]:
    pairs = [
        a["cpu_us_per_chunk"] / b["cpu_us_per_chunk"]
        for a, b in zip(per[top], per[bottom], strict=True)
        if a["cpu_us_per_chunk"] and b["cpu_us_per_chunk"]
    ]
    if not pairs:
        return {}
    return {
        "median": round(statistics.median(pairs), 3),
        "rounds": [round(p, 3) for p in pairs],
    }


def _cascade(
    tmp: Path, name: str, checkout: Path | None, dsn: str, upstream: str
) -> tuple[subprocess.Popen[bytes], int]:
    """``cascade-proxy serve`` of this checkout, or of ``checkout`` (first on the path)."""
    port = free_port()
    config = tmp / f"{name}.json"
    config.write_text(
        json.dumps(
            {
                "providers": {"openai": {"baseUrl": f"{upstream}/v1"}},
                "models": {"default": {"contextLimit": 128000}},
                "agents": {"default": {"provider": "openai"}},
            }
        )
    )
    env = {
        **os.environ,
        "DATABASE_URL": dsn,
        "CASCADE_LOG_LEVEL": "warning",
        "CASCADE_CONFIG": str(config),
    }
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout.resolve())
    cmd = [str(CASCADE_BIN), "serve", "--host", "127.0.0.1", "--port", str(port)]
    return spawn(cmd, tmp / f"{name}.log", env), port


def run(args: argparse.Namespace) -> dict[str, Any]:
    from proxy.pgembed import start_embedded

    tmp = Path(tempfile.mkdtemp(prefix="cascade-stream-chunks-"))
    procs: list[subprocess.Popen[bytes]] = []
    dsn, server = start_embedded(tmp / "pg")
    targets: dict[str, tuple[str, int]] = {}
    per: dict[str, list[dict[str, Any]]] = {}
    try:
        fake_port, floor_port = free_port(), free_port()
        fake = spawn(
            [PY, "-m", "bench.fake_upstream", "--port", str(fake_port), "--chunks",
             str(args.chunks), "--chunk-delay-ms", str(args.chunk_delay_ms)],
            tmp / "fake.log",
        )  # fmt: skip
        procs.append(fake)
        upstream = f"http://127.0.0.1:{fake_port}"
        floor = spawn(
            [PY, "-m", "bench.floor", "--port", str(floor_port), "--upstream", upstream],
            tmp / "floor.log",
        )
        procs.append(floor)
        wait_ready(f"{upstream}/v1/models", fake)
        wait_ready(f"http://127.0.0.1:{floor_port}/v1/models", floor)
        targets["floor"] = (f"http://127.0.0.1:{floor_port}", floor.pid)
        checkouts = {"cascade": None, **({"base": args.base} if args.base else {})}
        for name, checkout in checkouts.items():
            proc, port = _cascade(tmp, name, checkout, dsn, upstream)
            procs.append(proc)
            wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
            targets[name] = (f"http://127.0.0.1:{port}", proc.pid)
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
        names = list(targets)
        for name, (base, _) in targets.items():  # a warm-up request each, not counted
            asyncio.run(_round(base, f"sc-{name}-warm", 1, 60 + args.chunks * 0.01))
        per = {name: [] for name in names}
        for n in range(1, args.rounds + 1):
            shift = (n - 1) % len(names)
            for name in names[shift:] + names[:shift]:
                base, pid = targets[name]
                per[name].append(_measure(name, base, pid, args, n))
                time.sleep(args.pause)
    finally:
        for p in reversed(procs):
            stop(p)
        server.cleanup()
    result: dict[str, Any] = {
        "machine": machine(),
        "chunks": args.chunks,
        "chunk_delay_ms": args.chunk_delay_ms,
        "streams": args.streams,
        "base": str(args.base) if args.base else None,
        "summary": {name: _summary(rounds) for name, rounds in per.items()},
        "cascade_over_floor": _ratios(per, "cascade", "floor"),
        "rounds": per,
    }
    if "base" in per:
        result["cascade_over_base"] = _ratios(per, "cascade", "base")
        result["base_over_floor"] = _ratios(per, "base", "floor")
    return clean(result)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--chunk-delay-ms", type=float, default=1.0)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between rounds")
    parser.add_argument("--base", type=Path, default=None, metavar="DIR")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    parser.add_argument("--py-spy", type=Path, default=PY_SPY, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.base is not None and not (args.base / "proxy" / "__init__.py").exists():
        parser.error(f"--base {args.base}: not a checkout of this project (no proxy/)")
    emit(run(args), args.out, "stream_chunks.json")


if __name__ == "__main__":
    main()
