"""Markdown and PNG rendering of :mod:`bench.overhead` results (a plain dict, as in the JSON)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.common import ratio

__all__ = [
    "Rows",
    "metric",
    "render_markdown",
    "render_charts",
    "round_ratios_line",
    "versions_line",
]

Rows = dict[str, dict[str, dict[str, float]]]


def metric(rows: Rows, name: str, key: str, field: str) -> float:
    """``rows[name][key][field]``, NaN when the target, scenario or field is missing."""
    return rows.get(name, {}).get(key, {}).get(field, math.nan)


_LABELS = {
    "tiny_c1": "tiny request, c=1",
    "tiny_c32": "tiny request, c=32",
    "stream_c8": "streaming, 50 chunks, c=8",
    "large_c8": "agent request ~200 KB, c=8",
}


def _fmt(value: float, digits: int = 2) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _scenario_table(rows: Rows, key: str, names: list[str], floor: str) -> list[str]:
    stream = key.startswith("stream")
    head = [
        "target",
        "RPS",
        "p50 ms",
        "p99 ms",
        "+p50 ms",
        "+p99 ms",
        "RPS/floor",
        "RPS/LiteLLM",
        "CPU ms/req",
        "DB CPU ms/req",
        "req/CPU-s",
    ]
    if stream:
        head += ["TTFC p50", "TTFC p99", "gap p50", "gap p99", "span p50"]
    head.append("errors")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        r = rows.get(name, {}).get(key)
        if r is None:
            continue
        cells = [
            name,
            _fmt(r["rps"], 0),
            _fmt(r["p50"]),
            _fmt(r["p99"]),
            _fmt(r["added_p50"]),
            _fmt(r["added_p99"]),
            _fmt(ratio(r["rps"], metric(rows, floor, key, "rps"))),
            _fmt(ratio(r["rps"], metric(rows, "litellm", key, "rps"))),
            _fmt(r["cpu_ms_per_req"], 3),
            _fmt(r["db_cpu_ms_per_req"], 3),
            _fmt(r["req_per_cpu_s"], 0),
        ]
        if stream:
            cells += [
                _fmt(r["ttfc_p50"]),
                _fmt(r["ttfc_p99"]),
                _fmt(r["gap_p50"]),
                _fmt(r["gap_p99"]),
                _fmt(r["span_p50"], 1),
            ]
        cells.append(str(int(r["errors"])))
        out.append("| " + " | ".join(cells) + " |")
    return out


def round_ratios_line(ratios: dict[str, list[float]]) -> str:
    """One sentence with each RPS target's Cascade/LiteLLM ratio round by round ('' if none)."""
    parts = [
        f"{_LABELS.get(key, key)}: " + ", ".join(_fmt(v) for v in values)
        for key, values in ratios.items()
        if values
    ]
    if not parts:
        return ""
    return (
        "Cascade RPS / LiteLLM RPS in each round (the targets take the ratio of the "
        "medians): " + "; ".join(parts) + "."
    )


def versions_line(versions: dict[str, str]) -> str:
    """The versions the run measured, LiteLLM's first: its ratios compare only at one version.

    '' when none were recorded; a target that did not run has no version and is left out."""
    found = {name: version for name, version in versions.items() if version}
    order = sorted(found, key=lambda name: (name != "litellm", name))
    if not found:
        return ""
    return "Versions: " + ", ".join(f"{name} {found[name]}" for name in order) + "."


def render_markdown(result: dict[str, Any]) -> str:
    """The human-readable report: targets first, then one table per scenario."""
    meta, rows = result["meta"], result["rows"]
    names = [n for n in meta["targets"] if n in rows]
    lines = [
        "# Cascade overhead benchmark",
        "",
        f"`{meta['command']}` — {meta['when']}, {meta['machine']}, Python {meta['python']}; "
        f"{meta['rounds']} round(s) × {meta['window_s']} s windows (+{meta['warmup_s']} s "
        f"warm-up), targets interleaved; fake upstream streams 50 chunks "
        f"{meta['chunk_delay_ms']} ms apart. Medians over rounds; `+p50`/`+p99` = minus "
        "direct in the same round; CPU is the proxy process per request and req/CPU-s is "
        "1000 / (proxy + DB CPU ms per request); the targets compare against "
        f"`{meta['floor']}`. "
        + (
            f"Cascade runs with `CASCADE_POOL_MAX_SIZE={meta['cascade_pool']}`. "
            if meta.get("cascade_pool")
            else ""
        )
        + (
            "Every session is its own conversation. "
            if meta.get("conversations") == "distinct"
            else "Every session sends the same conversation. "
            if meta.get("conversations") == "same"
            else ""
        )
        + "Load average "
        f"(1/5/15 min) before the run: {meta['load_average_at_start']} (above ~0.5 means "
        "something else was competing for the 2 cores), at the end: "
        f"{meta['load_average_at_end']}.",
        "",
    ]
    if versions := versions_line(meta.get("versions") or {}):
        lines += [versions, ""]
    for name, reason in result["unavailable"].items():
        lines.append(f"- **{name} unavailable**: {reason}")
    lines += ["", "## Targets", "", "| target | rule | value | limit | met |", "|" + "---|" * 5]
    for t in result["targets"]:
        met = {True: "yes", False: "**no**", None: "unknown"}[t["met"]]
        lines.append(
            f"| {t['target']} | {t['rule']} | {_fmt(t['value'])} | {_fmt(t['limit'])} | {met} |"
        )
    if spread := round_ratios_line(result.get("round_ratios") or {}):
        lines += ["", spread]
    for key in meta["scenarios"]:
        lines += ["", f"## {_LABELS[key]}", "", *_scenario_table(rows, key, names, meta["floor"])]
    lines += [
        "",
        "## Memory",
        "",
        "Peak RSS is the proxy process's VmHWM; DB RSS is the peak "
        "sum over PostgreSQL's processes (shared buffers count once per process).",
        "",
        "| target | peak RSS MB | peak DB RSS MB |",
        "|---|---|---|",
    ]
    for name, res in result["resources"].items():
        db_rss = res["peak_db_rss_mb"] or math.nan
        lines.append(f"| {name} | {_fmt(res['peak_rss_mb'], 1)} | {_fmt(db_rss, 1)} |")
    return "\n".join(lines) + "\n"


def render_charts(result: dict[str, Any], out_dir: Path) -> list[str]:
    """PNG bar charts (RPS, added latency, streaming, CPU); returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    names = [n for n in result["meta"]["targets"] if n in rows]
    colors = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    files: list[str] = []

    def bars(fname: str, title: str, panels: list[tuple[str, str, str]], log: bool = False) -> None:
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
        for ax, (key, field, label) in zip(axes[0], panels, strict=True):
            shown = [n for n in names if not math.isnan(metric(rows, n, key, field))]
            vals = [metric(rows, n, key, field) for n in shown]
            ax.bar(range(len(shown)), vals, color=[colors[n] for n in shown])
            ax.set_xticks(range(len(shown)), shown, rotation=40, ha="right", fontsize=8)
            ax.set_title(f"{_LABELS[key]}\n{label}", fontsize=9)
            if log and vals and min(vals) > 0:
                ax.set_yscale("log")
            for i, v in enumerate(vals):
                ax.annotate(f"{v:,.3g}", (i, v), ha="center", va="bottom", fontsize=7)
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)
        files.append(fname)

    bars(
        "overhead_rps.png",
        "Requests per second (higher is better)",
        [(k, "rps", "RPS") for k in result["meta"]["scenarios"]],
        log=True,
    )
    bars(
        "overhead_added_latency.png",
        "Added p50 latency over direct, ms (lower is better)",
        [(k, "added_p50", "+p50 ms") for k in result["meta"]["scenarios"]],
    )
    bars(
        "overhead_stream.png",
        "Streaming (50 chunks): first chunk and gaps, ms",
        [
            ("stream_c8", m, lbl)
            for m, lbl in (
                ("ttfc_p50", "TTFC p50"),
                ("ttfc_p99", "TTFC p99"),
                ("gap_p50", "gap p50"),
                ("gap_p99", "gap p99"),
            )
        ],
    )
    bars(
        "overhead_cpu.png",
        "Proxy CPU ms per request (lower is better)",
        [(k, "cpu_ms_per_req", "CPU ms/req") for k in result["meta"]["scenarios"]],
    )
    return files
