"""bench/RESULTS.md: the command, machine and commit, then each part's targets and summary.

:func:`render_results` is pure: the run's metadata, each part's status and JSON, and the
paths of the charts and reports copied beside RESULTS.md in; the markdown out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.overhead_report import round_ratios_line, versions_line
from bench.run_checks import (
    ingest_targets,
    issue_targets,
    replay_checks,
    replay_summary,
    retrieval_checks,
)

__all__ = ["PARTS", "render_results"]

PARTS = ("overhead", "growth", "replay", "retrieval")
_QUICK_NOTE = "quick (smaller samples: trends, not final numbers)"
_REPLAY_NOTE = (
    "Issue #5's targets per file first (cost = main + fast model, cache-weighted: a prefix "
    "shared with the previous request at 0.1, the rest at 1; the long files are 1, 2, 4 and "
    "6), then what Cascade (`cascade-default`) must hold on every transcript. Totals over "
    "the files:"
)
_REPORT_ONLY_NOTE = (
    "- Parts were not re-run for this report (`--report-only`): each row names the command "
    "and time of the run whose JSON it summarises; the commit above is the report's, not "
    "necessarily theirs."
)


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "unknown"}[met]


def _minutes(seconds: float | None) -> str:
    return "–" if seconds is None or math.isnan(seconds) else f"{seconds / 60:.1f} min"


def _targets_table(targets: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| target | rule | value | limit | result |", "|---|---|---|---|---|"]
    for t in targets:
        lines.append(
            f"| {t['target']} | {t.get('rule', '')} | {_fmt(t.get('value'))} "
            f"| {_fmt(t.get('limit'))} | {_verdict(t.get('met'))} |"
        )
    return lines


def _tally(targets: Sequence[Mapping[str, Any]]) -> str:
    met = sum(1 for t in targets if t.get("met") is True)
    unknown = sum(1 for t in targets if t.get("met") is None)
    text = f"{met}/{len(targets)} met"
    return text + (f" ({unknown} unknown)" if unknown else "")


def _growth_section(data: Mapping[str, Any]) -> list[str]:
    lines = [
        "| mode | messages | p50 ms | p90 ms | p50 × smallest | proxy CPU ms | rows read / req |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, by_size in (data.get("table") or {}).items():
        for size in sorted(by_size, key=int):
            r = by_size[size]
            lines.append(
                f"| {mode} | {int(size):,} | {_fmt(r.get('p50_ms'), 1)} "
                f"| {_fmt(r.get('p90_ms'), 1)} | {_fmt(r.get('p50_ratio'))} "
                f"| {_fmt(r.get('cpu_ms'), 1)} "
                f"| {_fmt(r.get('rows_per_req'), 1)} |"
            )
    return lines


def _replay_section(summary: Mapping[int, Mapping[str, Mapping[str, float]]]) -> list[str]:
    lines = [
        "| limit | policy | files | cache-weighted (main+fast) | vs raw | over limit "
        "| broken pairs | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for limit in sorted(summary):
        for policy, c in summary[limit].items():
            lines.append(
                f"| {limit // 1000}k | {policy} | {int(c['files'])} | {c['cw_total'] / 1e6:.2f}M "
                f"| {_fmt(c['vs_raw'])} | {int(c['over_limit'])}/{int(c['requests'])} "
                f"| {int(c['broken_pairings'])} | {int(c['errors'])} |"
            )
    return lines


def _retrieval_section(data: Mapping[str, Any]) -> list[str]:
    t, e = data.get("turns") or {}, data.get("embedding") or {}
    size = (data.get("meta") or {}).get("size")
    return [
        f"A session of {_fmt(size)} stored messages: a new turn took {_fmt(t.get('on_p50_ms'))} ms "
        f"at p50 with retrieval on, {_fmt(t.get('off_p50_ms'))} ms with it off (ratio "
        f"{_fmt(t.get('ratio'), 3)}); the background worker embedded "
        f"{_fmt(e.get('worker_rate'), 1)} messages/s, the builtin embedder alone "
        f"{_fmt(e.get('embedder_alone_rate'), 1)}.",
    ]


def render_results(
    *,
    meta: Mapping[str, Any],
    parts: Mapping[str, Mapping[str, Any]],
    charts: Mapping[str, Sequence[str]],
    reports: Mapping[str, str] | None = None,
) -> str:
    """bench/RESULTS.md from each part's status (``ok``, ``seconds``, ``error``) and data.

    ``parts[name]["data"]`` is that part's JSON (absent when the part failed or was skipped);
    ``charts[name]`` are chart paths relative to bench/, and so is ``reports[name]``, the
    part's full markdown report when it was copied there.
    """
    reports = reports or {}
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `{meta['command']}` on {meta['when']}.",
        "",
        f"- Machine: {meta['machine']}; `nproc` = {meta['nproc']}; load average "
        f"{meta['load_start']} at the start, {meta['load_end']} at the end.",
        f"- Commit: `{meta['commit']}`; Python {meta['python']}.",
        *(
            [_REPORT_ONLY_NOTE]
            if meta.get("report_only")
            else [
                f"- Mode: {_QUICK_NOTE if meta['quick'] else 'full'}; total wall time "
                f"{meta['wall_s'] / 60:.1f} min."
            ]
        ),
        "",
        "| part | command | result | wall time | run at |",
        "|---|---|---|---|---|",
    ]
    checks: dict[str, list[dict[str, Any]]] = {}
    for name in PARTS:
        part = parts.get(name)
        if part is None:
            continue
        data = part.get("data") or {}
        if name == "replay" and data:
            rows = data.get("rows", [])
            checks[name] = [
                *issue_targets(rows),
                *ingest_targets(rows),
                *replay_checks(replay_summary(rows)),
            ]
        elif name == "retrieval" and data:
            checks[name] = retrieval_checks(data)
        elif data:
            checks[name] = list(data.get("targets", []))
        result = (
            _tally(checks[name])
            if part.get("ok") and name in checks
            else (f"**failed**: {part.get('error', 'no output')}")
        )
        lines.append(
            f"| {name} | `{part['command']}` | {result} | {_minutes(part.get('seconds'))} "
            f"| {part.get('when', meta['when'])} |"
        )
    sections = {
        "overhead": "## Overhead: what a proxy costs (vs a bare pass-through floor and LiteLLM)",
        "growth": "## Session growth: cost per request as the resent history grows",
        "replay": "## Transcript replay: token cost on real agent transcripts",
        "retrieval": "## Retrieval: a new turn's added time, the background embedding rate",
    }
    for name in PARTS:
        part = parts.get(name)
        if part is None:
            continue
        lines += ["", sections[name], ""]
        data = part.get("data")
        if not part.get("ok") or not data:
            lines.append(f"Failed: {part.get('error', 'no output')}.")
            continue
        lines += _targets_table(checks.get(name, []))
        if name == "overhead":
            if spread := round_ratios_line(data.get("round_ratios") or {}):
                lines += ["", spread]
            if versions := versions_line((data.get("meta") or {}).get("versions") or {}):
                lines += ["", versions]
            if data.get("unavailable"):
                gone = ", ".join(f"{k} ({v})" for k, v in data["unavailable"].items())
                lines += ["", f"Unavailable targets: {gone}."]
        if name == "growth":
            lines += ["", *_growth_section(data)]
        if name == "replay":
            lines += ["", _REPLAY_NOTE, ""]
            lines += _replay_section(replay_summary(data.get("rows", [])))
        if name == "retrieval":
            lines += ["", *_retrieval_section(data)]
        if name in reports:  # committed beside this file; bench/out is not
            lines += ["", f"Full report: [{reports[name]}]({reports[name]})."]
        else:
            lines += ["", f"Full report: `{meta.get('out_dir', 'bench/out')}/{name}.md`."]
        for chart in charts.get(name, ()):
            lines += ["", f"![{Path(chart).stem}]({chart})"]
    return "\n".join(lines) + "\n"
