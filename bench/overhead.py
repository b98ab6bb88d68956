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
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import litellm_env, procs
from bench.common import clean, free_port, machine, out_file
from bench.loadgen import median, ratio
from bench.overhead_report import Rows, metric, render_charts, render_markdown

if TYPE_CHECKING:  # the bench extra installs psutil; the pure helpers below run without it
    import psutil

__all__ = [
    "SCENARIOS",
    "FULL_TARGETS",
    "QUICK_TARGETS",
    "RATIO_SCENARIOS",
    "Target",
    "aggregate",
    "evaluate",
    "round_ratios",
    "main",
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
SCENARIOS: dict[str, tuple[str, int]] = {
    "tiny_c1": ("tiny", 1),
    "tiny_c32": ("tiny", 32),
    "stream_c8": ("stream", 8),
    "large_c8": ("large", 8),
}
FULL_TARGETS = ("direct", "floor", "floor-httpx-default", "floor-httpx-aiohttp", "floor-httpx2",
                "floor-aiohttp", "cascade", "litellm")  # fmt: skip
QUICK_TARGETS = ("direct", "floor", "floor-httpx-aiohttp", "cascade", "litellm")
FLOOR = "floor"
METRICS = ("rps", "p50", "p99", "ttfc_p50", "ttfc_p99", "gap_p50", "gap_p99", "span_p50",
           "cpu_ms_per_req", "db_cpu_ms_per_req", "loadgen_cpu_ms_per_req",
           "fake_cpu_ms_per_req")  # fmt: skip


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


def _cpu(procs: list[psutil.Process]) -> float:
    import psutil

    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def _rss_mb(procs: list[psutil.Process]) -> float:
    import psutil

    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 2**20


def _hwm_mb(pid: int) -> float:
    """Peak RSS (VmHWM) the kernel recorded for ``pid``; 0 when it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


# ----------------------------------------------------------------------------- processes


def _wait_ready(url: str, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return True
        time.sleep(0.25)
    return False


def _spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            env=env,
            start_new_session=True,
        )


def _stop(target: Target) -> None:
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


def _start(name: str, fake: str, logs: Path, tmp: Path, key: str) -> Target:
    target = Target(name)
    port = free_port()
    target.url = f"http://127.0.0.1:{port}"
    log = logs / f"{name}.log"
    if name.startswith("floor"):
        client = name.removeprefix("floor").removeprefix("-") or "httpx"
        cmd = [PY, "-m", "bench.floor", "--port", str(port), "--upstream", fake, "--client", client]
        target.proc = _spawn(cmd, log)
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
        target.proc = _spawn(cmd, log, env)
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
    if not _wait_ready(ready, target.proc, timeout):
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        target.unavailable = f"did not become ready at {ready}: {' | '.join(tail)[:400]}"
        _stop(target)
    return target


# ----------------------------------------------------------------------------- windows


def _run_window(
    target: Target, key: str, cfg: argparse.Namespace, run_no: int, api_key: str, fake: Target
) -> dict[str, Any]:
    """One load-generator run against ``target``; CPU is sampled exactly over the measured
    window (the generator prints ``phase:start``/``phase:end``), RSS every 200 ms."""
    scenario, concurrency = SCENARIOS[key]
    args = (
        f"--url {target.url} --scenario {scenario} --concurrency {concurrency} --duration "
        f"{cfg.window} --warmup {cfg.warmup} --session-prefix {target.name}-{run_no}-{key} "
        f"--api-key {api_key} --phase-markers --conversations {cfg.conversations}"
    )
    cmd = [PY, "-m", "bench.loadgen", *args.split()]
    procs: dict[str, list[psutil.Process]] = {"own": [], "db": [], "fake": []}
    cpu: dict[str, list[float]] = {"own": [], "db": [], "fake": []}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            target.peak_db_rss_mb = max(target.peak_db_rss_mb, _rss_mb(procs["db"]))

    loadgen = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT)
    )
    killer = threading.Timer(cfg.warmup + cfg.window + 60, loadgen.kill)
    killer.start()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    errors: list[str] = []
    try:
        assert loadgen.stderr is not None and loadgen.stdout is not None
        for line in loadgen.stderr:
            if line.strip() == "phase:start":
                procs["own"], procs["db"] = target.processes()
                procs["fake"] = fake.processes()[0]
            if line.startswith("phase:"):
                for name, group in procs.items():
                    cpu[name].append(_cpu(group))
            elif line.strip():
                errors.append(line.strip())
        stdout = loadgen.stdout.read()
        code = loadgen.wait()
    finally:
        killer.cancel()
        stop.set()
        sampler.join()
    result: dict[str, Any] = (
        json.loads(stdout)
        if code == 0 and stdout.strip()
        else {"error": errors[-1:] or [f"loadgen exited with {code}"]}
    )
    if target.proc is not None:
        target.peak_rss_mb = max(target.peak_rss_mb, _hwm_mb(target.proc.pid))
    n = max(1, result.get("requests", 0))

    def per_req(name: str) -> float:
        spent = cpu[name]
        return 1000 * (spent[1] - spent[0]) / n if len(spent) == 2 and procs[name] else math.nan

    result.update(
        {
            "target": target.name,
            "scenario_key": key,
            "round": run_no,
            "cpu_ms_per_req": per_req("own"),
            "db_cpu_ms_per_req": per_req("db"),
            "fake_cpu_ms_per_req": per_req("fake"),
            "loadgen_cpu_ms_per_req": 1000 * result.get("cpu_s", math.nan) / n,
        }
    )
    return result


def _flat(window: dict[str, Any]) -> dict[str, float]:
    lat = window.get("latency_ms", {})
    ttfc = window.get("ttfc_ms", {})
    gap = window.get("gap_ms", {})
    span = window.get("span_ms", {})
    nan = math.nan
    return {
        "rps": window.get("rps", nan),
        "p50": lat.get("p50", nan),
        "p99": lat.get("p99", nan),
        "ttfc_p50": ttfc.get("p50", nan),
        "ttfc_p99": ttfc.get("p99", nan),
        "gap_p50": gap.get("p50", nan),
        "gap_p99": gap.get("p99", nan),
        "span_p50": span.get("p50", nan),
        **{k: window.get(k, nan) for k in METRICS[8:]},
    }


def aggregate(windows: list[dict[str, Any]]) -> Rows:
    """rows[target][scenario_key]: the median over rounds of every metric, plus ``added_p50`` /
    ``added_p99`` (median over rounds of the same-round difference to ``direct``), ``errors``
    and ``rounds``. Pure: windows in, numbers out."""
    direct = {
        (w["scenario_key"], w["round"]): _flat(w) for w in windows if w.get("target") == "direct"
    }
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for w in windows:
        grouped.setdefault((w["target"], w["scenario_key"]), []).append(w)
    rows: Rows = {}
    for (name, key), group in grouped.items():
        flats = [_flat(w) for w in group]
        row = {m: median([f[m] for f in flats]) for m in METRICS}
        for q in ("p50", "p99"):
            base = [direct.get((key, w["round"]), {}).get(q, math.nan) for w in group]
            row[f"added_{q}"] = median([f[q] - b for f, b in zip(flats, base, strict=True)])
        row["errors"] = float(
            sum(sum(w.get("errors", {}).values()) + ("error" in w) for w in group)
        )
        row["rounds"] = float(len(group))
        db_cpu = 0.0 if math.isnan(row["db_cpu_ms_per_req"]) else row["db_cpu_ms_per_req"]
        row["req_per_cpu_s"] = ratio(1000.0, row["cpu_ms_per_req"] + db_cpu)
        rows.setdefault(name, {})[key] = row
    return rows


RATIO_SCENARIOS = ("tiny_c32", "large_c8")
"""The scenarios whose targets are an RPS ratio to LiteLLM; their per-round ratios are kept."""


def round_ratios(windows: list[dict[str, Any]], key: str) -> list[float]:
    """Cascade's RPS over LiteLLM's in scenario ``key``, round by round, in round order (the
    two windows of a round run minutes apart at most, so each ratio has its own drift). The
    target takes the ratio of the medians; the spread of these says how far one run can be
    trusted. Pure."""
    by_round: dict[int, dict[str, float]] = {}
    for w in windows:
        if w.get("scenario_key") == key and w.get("target") in ("cascade", "litellm"):
            by_round.setdefault(w["round"], {})[w["target"]] = w.get("rps", math.nan)
    return [
        ratio(pair.get("cascade", math.nan), pair.get("litellm", math.nan))
        for _, pair in sorted(by_round.items())
    ]


def evaluate(rows: Rows, floor: str = FLOOR) -> list[dict[str, Any]]:
    """Issue 19's bars for Cascade; ``met`` is None when a column needed is missing.

    The two CPU-normalised rows restate the RPS targets as requests per CPU-second of the proxy
    (plus its database): on a shared 2-core box wall-clock RPS moves with whatever else runs,
    CPU per request much less."""

    def vs_litellm(key: str, field: str) -> float:
        return ratio(metric(rows, "cascade", key, field), metric(rows, "litellm", key, field))

    def vs_floor(key: str) -> float:
        return ratio(metric(rows, "cascade", key, "rps"), metric(rows, floor, key, "rps"))

    floor_c1 = metric(rows, floor, "tiny_c1", "added_p50")
    checks = [  # (name, value, limit, higher is better, rule): issue 19's bars
        ("added p50 at c=1", metric(rows, "cascade", "tiny_c1", "added_p50"),
         3 * floor_c1 if floor_c1 > 0 else math.nan, False,
         "Cascade's added p50 (tiny, c=1) <= 3x the floor's"),
        ("RPS at c=32 against the floor", vs_floor("tiny_c32"), 1.0, True,
         "Cascade RPS / floor RPS (tiny, c=32) >= 1"),
        ("RPS at c=32", vs_litellm("tiny_c32", "rps"), 6.0, True,
         "Cascade RPS / LiteLLM RPS (tiny, c=32) >= 6"),
        ("RPS on the large request against the floor", vs_floor("large_c8"), 0.8, True,
         "Cascade RPS / floor RPS (large, c=8) >= 0.8"),
        ("RPS on the large request", vs_litellm("large_c8", "rps"), 5.0, True,
         "Cascade RPS / LiteLLM RPS (large, c=8) >= 5"),
        ("stream first chunk p99", metric(rows, "cascade", "stream_c8", "ttfc_p99"),
         metric(rows, floor, "stream_c8", "ttfc_p99") + 10.0, False,
         "Cascade TTFC p99 <= floor's + 10 ms"),
        ("stream not buffered", metric(rows, "cascade", "stream_c8", "span_p50"),
         0.8 * metric(rows, "direct", "stream_c8", "span_p50"), True,
         "first-to-last chunk p50 >= 0.8x direct's (chunks arrive as sent)"),
        ("CPU-normalised, c=32", vs_litellm("tiny_c32", "req_per_cpu_s"), 6.0, True,
         "Cascade req per CPU-s / LiteLLM's (tiny, c=32) >= 6"),
        ("CPU-normalised, large", vs_litellm("large_c8", "req_per_cpu_s"), 5.0, True,
         "Cascade req per CPU-s / LiteLLM's (large, c=8) >= 5"),
    ]  # fmt: skip
    out = []
    for name, value, limit, higher, rule in checks:
        met = None
        if not (math.isnan(value) or math.isnan(limit)):
            met = value >= limit if higher else value <= limit
        out.append({"target": name, "rule": rule, "value": value, "limit": limit, "met": met})
    return out


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
    fake.proc = _spawn([PY, "-m", "bench.fake_upstream", *fake_args], logs / "fake.log")
    started.append(fake)
    if not _wait_ready(f"{fake.url}/v1/models", fake.proc, 30):
        raise RuntimeError(f"the fake upstream did not start; see {logs / 'fake.log'}")
    targets: list[Target] = []
    unavailable: dict[str, str] = {}
    for name in args.target_names:
        if name == "direct":
            targets.append(Target("direct", url=fake.url))
            continue
        _log(f"starting {name}")
        target = _start(name, fake.url, logs, tmp, api_key)
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
                window = _run_window(target, key, args, run_no, api_key, fake)
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
                _stop(target)
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
