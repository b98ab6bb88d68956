"""The session-growth numbers and report: rows read, the per-size table, targets, markdown, chart.

Pure functions of what :mod:`bench.growth` measured (a plain dict, as in the JSON), except
:func:`render_chart`, which draws with matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import percentile, ratio
from bench.growth_scenario import TABLES

__all__ = ["rows_read", "aggregate", "evaluate", "render_markdown", "render_chart"]

Counters = Mapping[str, Mapping[str, int]]


def rows_read(before: Counters, after: Counters) -> dict[str, int]:
    """Rows each table gave up between two readings: ``seq_tup_read + idx_tup_fetch`` deltas.

    A table missing from a reading counts as zero there (it had no activity yet).
    """
    out: dict[str, int] = {}
    for table in sorted(set(before) | set(after)):
        b, a = before.get(table, {}), after.get(table, {})
        out[table] = sum(a.get(k, 0) - b.get(k, 0) for k in ("seq_tup_read", "idx_tup_fetch"))
    return out


def aggregate(
    samples: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, dict[str, float]]]:
    """table[mode][size]: latency median/p90/mean/n, ratios to the smallest size, rows read.

    ``samples`` are measured requests (``mode``, ``size``, ``ms``); ``rows`` are readings of
    the rows pass (``mode``, ``size``, ``requests``, ``tables``: rows read per table).
    Pure: NaN wherever a number could not be measured.
    """
    cells: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    readings: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in samples:
        cells.setdefault((s["mode"], str(s["size"])), []).append(s)
    for r in rows:
        readings.setdefault((r["mode"], str(r["size"])), []).append(r)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for mode, size in sorted(cells.keys() | readings.keys(), key=lambda k: (k[0], int(k[1]))):
        got, reads = cells.get((mode, size), []), readings.get((mode, size), [])
        ms = [s["ms"] for s in got]
        row: dict[str, float] = {
            "n": float(len(ms)),
            "p50_ms": percentile(ms, 50),
            "p90_ms": percentile(ms, 90),
            "mean_ms": sum(ms) / len(ms) if ms else math.nan,
        }
        for key in ("messages", "body_kb", "cpu_ms", "db_cpu_ms"):
            row[key] = percentile([s[key] for s in got if key in s], 50)
        n_req = sum(r["requests"] for r in reads)
        for name in TABLES:
            part = sum(r["tables"].get(name, 0) for r in reads)
            row[f"rows_{name}"] = part / n_req if n_req else math.nan
        total = sum(sum(r["tables"].values()) for r in reads)
        row["rows_per_req"] = total / n_req if n_req else math.nan
        table.setdefault(mode, {})[size] = row
    for by_size in table.values():
        smallest = min(by_size, key=int)
        for row in by_size.values():
            row["p50_ratio"] = ratio(row["p50_ms"], by_size[smallest]["p50_ms"])
            row["p90_ratio"] = ratio(row["p90_ms"], by_size[smallest]["p90_ms"])
            row["rows_ratio"] = ratio(row["rows_per_req"], by_size[smallest]["rows_per_req"])
    return table


def evaluate(
    table: Mapping[str, Mapping[str, Mapping[str, float]]], *, max_ratio: float = 2.0
) -> list[dict[str, Any]]:
    """The issue's two targets per mode, against the smallest size.

    Latency: the largest size's median is at most ``max_ratio`` x the smallest's. Rows read
    "stay constant": no size reads more than 10% (and 2 rows) more per request than the
    smallest; the worst size is reported. ``met`` is None when a number is unknown.
    """
    out: list[dict[str, Any]] = []
    for mode, by_size in table.items():
        if len(by_size) < 2:
            continue
        sizes = sorted(by_size, key=int)
        small, large = sizes[0], sizes[-1]
        lat = by_size[large].get("p50_ratio", math.nan)
        base = by_size[small].get("rows_per_req", math.nan)
        worst = max(sizes[1:], key=lambda n: _nan_low(by_size[n].get("rows_per_req", math.nan)))
        rows_worst = by_size[worst].get("rows_per_req", math.nan)
        checks = [
            (f"{mode}: latency {large} vs {small}", lat, max_ratio,
             f"median latency at {large} messages <= {max_ratio:g}x the one at {small}"),
            (f"{mode}: rows read {worst} vs {small}", rows_worst, 1.1 * base + 2,
             f"rows read per request at every size <= 1.1x the one at {small} (+2)"),
        ]  # fmt: skip
        for name, value, limit, rule in checks:
            met = None if math.isnan(value) or math.isnan(limit) else bool(value <= limit)
            out.append({"target": name, "rule": rule, "value": value, "limit": limit, "met": met})
    return out


def _nan_low(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _fmt(value: float, digits: int = 1) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "unknown"}[met]


def render_markdown(result: Mapping[str, Any]) -> str:
    """The report: targets, then one table per mode (latency, ratios, rows read per table)."""
    meta = result.get("meta", {})
    lines = [
        "## Session growth",
        "",
        f"`{meta.get('command', 'python -m bench.growth')}` — {meta.get('when', '')}, "
        f"{meta.get('machine', '')}, load average {meta.get('load_average_at_start', '')} "
        f"→ {meta.get('load_average_at_end', '')}; {meta.get('rounds', '?')} rounds × "
        f"{meta.get('requests', '?')} requests per size and mode; proxy tokenizer "
        f"`{meta.get('tokenizer', '?')}`.",
        "",
        "| target | value | limit | result |",
        "|---|---|---|---|",
    ]
    for t in result.get("targets", []):
        lines.append(
            f"| {t['target']} | {_fmt(t['value'], 2)} | {_fmt(t['limit'], 2)} "
            f"| {_verdict(t['met'])} |"
        )
    for mode, by_size in result.get("table", {}).items():
        lines += [
            "",
            f"### Mode `{mode}`",
            "",
            "| messages | body KB | p50 ms | p90 ms | p50 × | p90 × | proxy CPU ms | DB CPU ms "
            "| rows read / req | " + " | ".join(TABLES) + " |",
            "|---" * (9 + len(TABLES)) + "|",
        ]
        for size in sorted(by_size, key=int):
            r = by_size[size]
            per_table = " | ".join(_fmt(r.get(f"rows_{t}", math.nan)) for t in TABLES)
            lines.append(
                f"| {int(size):,} | {_fmt(r['body_kb'], 0)} | {_fmt(r['p50_ms'])} "
                f"| {_fmt(r['p90_ms'])} | {_fmt(r['p50_ratio'], 2)} | {_fmt(r['p90_ratio'], 2)} "
                f"| {_fmt(r.get('cpu_ms', math.nan))} | {_fmt(r.get('db_cpu_ms', math.nan))} "
                f"| {_fmt(r['rows_per_req'])} | {per_table} |"
            )
    lines += [
        "",
        "CPU ms: median per request over sessions (the proxy's process; PostgreSQL's "
        "postmaster and backends). "
        "Rows read = `seq_tup_read + idx_tup_fetch` from `pg_stat_user_tables`, per request "
        "including the reply stored after answering. `full`: no summary, the window is the "
        "whole history; `compacted`: a summary folds all but the last few messages.",
    ]
    return "\n".join(lines) + "\n"


def render_chart(result: Mapping[str, Any], path: Path) -> Path:
    """Three panels against history length: latency (p50 with a p90 whisker and the 2x
    target as a dashed line per mode), the proxy's CPU per request, and rows read."""
    import matplotlib  # heavy; only the report needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_lat, ax_cpu, ax_rows) = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, (mode, by_size) in enumerate(result.get("table", {}).items()):
        color = f"C{i}"
        sizes = sorted(by_size, key=int)
        xs = [int(s) for s in sizes]
        p50 = [by_size[s]["p50_ms"] for s in sizes]
        p90 = [by_size[s]["p90_ms"] for s in sizes]
        err = [[0.0] * len(xs), [max(0.0, b - a) for a, b in zip(p50, p90, strict=True)]]
        ax_lat.errorbar(
            xs, p50, yerr=err, marker="o", capsize=4, color=color, label=f"{mode} (p50, p90)"
        )
        if not math.isnan(p50[0]):
            ax_lat.axhline(2 * p50[0], color=color, ls="--", lw=1, label=f"{mode}: 2× target")
        ax_cpu.plot(
            xs,
            [by_size[s].get("cpu_ms", math.nan) for s in sizes],
            marker="o",
            color=color,
            label=mode,
        )
        ax_rows.plot(
            xs, [by_size[s]["rows_per_req"] for s in sizes], marker="o", color=color, label=mode
        )
    for ax, title, unit in (
        (ax_lat, "Latency per request", "ms"),
        (ax_cpu, "Proxy CPU per request", "CPU ms"),
        (ax_rows, "PostgreSQL rows read per request", "rows"),
    ):
        ax.set_xscale("log")
        if any(y > 0 for line in ax.get_lines() for y in line.get_ydata()):
            ax.set_yscale("log")
        ax.set_xlabel("messages in the session")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
