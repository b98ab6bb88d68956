"""The overhead benchmark's rounds: one load-generator window per target and scenario, and
the numbers over rounds (medians, added latency, per-round ratios, issue 19's bars).

:func:`run_window` runs :mod:`bench.loadgen` in its own process and samples the target's CPU
over exactly the measured window; :func:`aggregate`, :func:`round_ratios` and :func:`evaluate`
are pure: windows in, numbers out.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import threading
from typing import TYPE_CHECKING, Any

from bench.common import median, ratio
from bench.overhead_report import Rows, metric
from bench.overhead_targets import PY, ROOT, Target, cpu_seconds, hwm_mb, rss_mb

if TYPE_CHECKING:  # the bench extra installs psutil; the pure helpers below run without it
    import psutil

__all__ = [
    "SCENARIOS",
    "FLOOR",
    "METRICS",
    "RATIO_SCENARIOS",
    "run_window",
    "aggregate",
    "round_ratios",
    "evaluate",
]

SCENARIOS: dict[str, tuple[str, int]] = {
    "tiny_c1": ("tiny", 1),
    "tiny_c32": ("tiny", 32),
    "stream_c8": ("stream", 8),
    "large_c8": ("large", 8),
}
FLOOR = "floor"
METRICS = ("rps", "p50", "p99", "ttfc_p50", "ttfc_p99", "gap_p50", "gap_p99", "span_p50",
           "cpu_ms_per_req", "db_cpu_ms_per_req", "loadgen_cpu_ms_per_req",
           "fake_cpu_ms_per_req")  # fmt: skip


def run_window(
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
            target.peak_db_rss_mb = max(target.peak_db_rss_mb, rss_mb(procs["db"]))

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
                    cpu[name].append(cpu_seconds(group))
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
        target.peak_rss_mb = max(target.peak_rss_mb, hwm_mb(target.proc.pid))
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
