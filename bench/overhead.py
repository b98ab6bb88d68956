"""What a proxy costs: Cascade against a bare pass-through floor and LiteLLM, same run, same box.

``python -m bench.overhead [--quick] [--out bench/out/overhead.json] [--targets a,b]
[--scenarios large_c8,...] [--conversations distinct|same]``

Starts the fake upstream (:mod:`bench.fake_upstream`), the floor pass-through in its client
variants (:mod:`bench.floor`), Cascade (``cascade-proxy serve`` with a fresh embedded
PostgreSQL, persistence and the cascade on) and LiteLLM's proxy from its own venv
(:mod:`bench.litellm_env`), each in its own process. Then, for ``rounds`` rounds, every scenario
against every target, interleaved (the target order rotates each round so drift spreads
evenly), each window driven by :mod:`bench.loadgen` in a separate process.

Per window it records the load generator's numbers and the CPU seconds the target's process
(and, for Cascade, its PostgreSQL) spent, and the peak RSS. The report takes medians over
rounds; added latency is a target's p50/p99 minus direct's in the same round and scenario.
Writes ``overhead.json``, ``overhead.md`` and ``overhead_*.png`` next to ``--out``.
Any target that cannot start is reported as unavailable with its reason, and the run goes on.

Every session is its own conversation by default (``bench.loadgen``'s ``distinct``), in every
scenario: a proxy serving real users never sees the same 36-message opening in every session,
and with it a cache keyed by content (Cascade's ingest memo) answers nearly every request and
hides what a new session and an extending step cost (docs/perf.md). ``--conversations same``
sends one conversation in every session, as runs before 2026-12-02 did; its figures are
comparable with those runs, not with distinct ones.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import secrets
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import clean, free_port, machine, out_file
from bench.overhead_report import render_charts, render_markdown
from bench.overhead_rounds import (
    FLOOR,
    RATIO_SCENARIOS,
    SCENARIOS,
    aggregate,
    evaluate,
    round_ratios,
    run_window,
)
from bench.overhead_targets import (
    CASCADE_POOL,
    PY,
    ROOT,
    Target,
    spawn,
    start_target,
    stop_target,
    wait_ready,
)

__all__ = ["FULL_TARGETS", "QUICK_TARGETS", "main"]

FULL_TARGETS = ("direct", "floor", "floor-httpx-default", "floor-httpx-aiohttp", "floor-httpx2",
                "floor-aiohttp", "cascade", "litellm")  # fmt: skip
QUICK_TARGETS = ("direct", "floor", "floor-httpx-aiohttp", "cascade", "litellm")


def _versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for dist in (
        "httpx",
        "httpx-aiohttp",
        "aiohttp",
        "httpx2",
        "fastapi",
        "uvicorn",
        "uvloop",
        "cascade-proxy",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[dist] = metadata.version(dist)
    return found


# ----------------------------------------------------------------------------- main


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, short windows (< 2 min)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "overhead.json")
    parser.add_argument("--targets", help=f"comma-separated subset of {','.join(FULL_TARGETS)}")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--window", type=float, help="measured seconds per window")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds before each window")
    parser.add_argument("--chunk-delay-ms", type=float, default=2.0)
    parser.add_argument(
        "--scenarios", help=f"comma-separated subset of {','.join(SCENARIOS)} (default: all)"
    )
    parser.add_argument(
        "--conversations",
        choices=("distinct", "same"),
        default="distinct",
        help="distinct: every session its own conversation; same: one in every session",
    )
    parser.add_argument(
        "--floor", default=FLOOR, help="which floor variant the targets compare against"
    )
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    # Five rounds: same-round Cascade/LiteLLM RPS ratios at c=32 spread widely, mostly
    # because LiteLLM's own RPS moves between rounds, and the median of five moves less with
    # one odd round.
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.window = args.window or (1.5 if args.quick else 3.0)
    args.warmup = args.warmup if args.warmup is not None else (0.3 if args.quick else 0.5)
    chosen = (
        args.targets.split(",")
        if args.targets
        else list(QUICK_TARGETS if args.quick else FULL_TARGETS)
    )
    unknown = set(chosen) - set(FULL_TARGETS)
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    if "direct" not in chosen:
        chosen.insert(0, "direct")  # every added-latency number is relative to it
    if not args.floor.startswith("floor") or args.floor not in FULL_TARGETS:
        parser.error(f"--floor must be one of the floor variants, not {args.floor!r}")
    if args.floor not in chosen:
        chosen.insert(1, args.floor)
    args.target_names = chosen
    args.scenario_keys = args.scenarios.split(",") if args.scenarios else list(SCENARIOS)
    unknown = set(args.scenario_keys) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    return args


def _log(msg: str) -> None:
    print(f"[overhead {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _bench(
    args: argparse.Namespace, tmp: Path, logs: Path, started: list[Target]
) -> dict[str, Any]:
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    api_key = "sk-bench-" + secrets.token_hex(24)
    fake = Target("fake")
    fake_port = free_port()
    fake.url = f"http://127.0.0.1:{fake_port}"
    fake_args = f"--port {fake_port} --chunk-delay-ms {args.chunk_delay_ms}".split()
    fake.proc = spawn([PY, "-m", "bench.fake_upstream", *fake_args], logs / "fake.log")
    started.append(fake)
    if not wait_ready(f"{fake.url}/v1/models", fake.proc, 30):
        raise RuntimeError(f"the fake upstream did not start; see {logs / 'fake.log'}")
    targets: list[Target] = []
    unavailable: dict[str, str] = {}
    for name in args.target_names:
        if name == "direct":
            targets.append(Target("direct", url=fake.url))
            continue
        _log(f"starting {name}")
        target = start_target(name, fake.url, logs, tmp, api_key)
        started.append(target)
        if target.unavailable:
            _log(f"{name} unavailable: {target.unavailable}")
            unavailable[name] = target.unavailable
        else:
            targets.append(target)
    windows: list[dict[str, Any]] = []
    for run_no in range(args.rounds):
        for key in args.scenario_keys:
            order = targets[run_no % len(targets) :] + targets[: run_no % len(targets)]
            for target in order:
                if target.proc is not None and target.proc.poll() is not None:
                    unavailable.setdefault(target.name, "exited during the run")
                    continue
                window = run_window(target, key, args, run_no, api_key, fake)
                windows.append(window)
                _log(
                    f"round {run_no + 1}/{args.rounds} {key:9s} {target.name:20s} "
                    f"rps={window.get('rps', math.nan):8.1f} "
                    f"p50={window.get('latency_ms', {}).get('p50', math.nan):7.2f} ms "
                    f"errors={window.get('errors') or window.get('error') or 0}"
                )
    rows = aggregate(windows)
    versions = _versions()
    for t in targets:
        if t.name == "litellm":
            versions["litellm"] = t.version
    return {
        "meta": {
            "command": shlex.join(["python", "-m", "bench.overhead", *args.argv]),
            "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine(),
            "python": platform.python_version(),
            "versions": versions,
            "rounds": args.rounds,
            "window_s": args.window,
            "warmup_s": args.warmup,
            "chunk_delay_ms": args.chunk_delay_ms,
            "floor": args.floor,
            "conversations": args.conversations,
            "cascade_pool": CASCADE_POOL,
            "load_average_at_start": load_at_start,
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            "targets": [t.name for t in targets],
            "scenarios": {
                k: {"scenario": s, "concurrency": c}
                for k, (s, c) in SCENARIOS.items()
                if k in args.scenario_keys
            },
        },
        "unavailable": unavailable,
        "targets": evaluate(rows, args.floor),
        "round_ratios": {key: round_ratios(windows, key) for key in RATIO_SCENARIOS},
        "rows": rows,
        "resources": {
            t.name: {"peak_rss_mb": t.peak_rss_mb, "peak_db_rss_mb": t.peak_db_rss_mb}
            for t in targets
            if t.proc is not None
        },
        "windows": windows,
    }


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    out = out_file(args.out, "overhead.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    logs = out.parent / "logs"
    logs.mkdir(exist_ok=True)
    started: list[Target] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cascade-bench-", ignore_cleanup_errors=True) as tmp:
        try:
            result = _bench(args, Path(tmp), logs, started)
        finally:
            for target in reversed(started):
                stop_target(target)
    result["meta"]["wall_s"] = round(time.monotonic() - t0, 1)
    out.write_text(json.dumps(clean(result), indent=1))
    markdown = render_markdown(result)
    out.with_suffix(".md").write_text(markdown)
    charts = render_charts(result, out.parent)
    _log(
        f"wrote {out}, {out.with_suffix('.md').name} and {', '.join(charts)} "
        f"in {result['meta']['wall_s']} s"
    )
    print(markdown)


if __name__ == "__main__":
    main()
