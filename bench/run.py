"""One command for every benchmark: overhead, session growth, transcript replay, retrieval.

``python -m bench.run [--quick] [--only overhead growth replay retrieval]``

Runs each part in its own process, one after the other (they would skew each other's numbers
on a small box), writing ``bench/out/{overhead,growth,replay,retrieval}.{json,md,png}``; a part that
fails is reported as failed and the others still run. Then it writes ``bench/RESULTS.md``: the
exact command, date, machine (cores, load average), commit, and a short summary table per
part with its targets met or not, linking the charts it copies into ``bench/charts/`` (which
is committed; ``bench/out/`` is not).

Full: ``overhead`` (5 rounds, every target, ~11 min), ``growth`` (5 rounds, ~3 min),
``replay`` (every file at 32k and 128k, ~4 min) and ``retrieval`` (a session of 10,000
messages, ~2 min). ``--quick`` (well under 10 min): ``overhead --quick``, ``growth --quick``,
``replay`` on files 1 and 2 at 32k and ``retrieval --quick`` (400 messages).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.overhead_report import round_ratios_line, versions_line

__all__ = [
    "PARTS",
    "part_commands",
    "replay_summary",
    "replay_checks",
    "retrieval_checks",
    "render_results",
    "main",
]

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "RESULTS.md"
PARTS = ("overhead", "growth", "replay", "retrieval")
QUICK_REPLAY = ("--files", "1", "2", "--limit", "32000")
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
_CHART_GLOBS = {
    "overhead": "overhead*.png",
    "growth": "growth.png",
    "replay": "replay.png",
    "retrieval": "retrieval*.png",  # none yet: its report is a table
}


# ----------------------------------------------------------------------------- pure helpers


def part_commands(quick: bool, out: Path = OUT) -> dict[str, list[str]]:
    """The ``python -m`` arguments of each part, each writing its JSON into ``out``."""
    flag = ["--quick"] if quick else []
    return {
        "overhead": ["bench.overhead", *flag, "--out", str(out / "overhead.json")],
        "growth": ["bench.growth", *flag, "--out", str(out / "growth.json")],
        "replay": [
            "bench.replay",
            *(QUICK_REPLAY if quick else ()),
            "--out",
            str(out / "replay.json"),
        ],
        "retrieval": ["bench.retrieval", *flag, "--out", str(out / "retrieval.json")],
    }


def replay_summary(rows: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, dict[str, float]]]:
    """summary[limit][policy]: totals over files of cost, requests over the limit, errors.

    ``cw_total`` is the cache-weighted cost of the main and fast model together;
    ``vs_raw`` divides it by the ``raw`` policy's at the same limit (NaN without raw).
    """
    out: dict[int, dict[str, dict[str, float]]] = {}
    for r in rows:
        cell = out.setdefault(int(r["limit"]), {}).setdefault(
            str(r["policy"]),
            {
                "files": 0.0,
                "requests": 0.0,
                "over_limit": 0.0,
                "broken_pairings": 0.0,
                "errors": 0.0,
                "billed_main": 0.0,
                "billed_fast": 0.0,
                "cw_total": 0.0,
                "peak_prompt": 0.0,
            },
        )
        cell["files"] += 1
        for key in (
            "requests",
            "over_limit",
            "broken_pairings",
            "errors",
            "billed_main",
            "billed_fast",
        ):
            cell[key] += float(r.get(key) or 0)
        cell["cw_total"] += float(r.get("cache_weighted") or 0)
        cell["cw_total"] += float(r.get("cache_weighted_fast") or 0)
        cell["peak_prompt"] = max(cell["peak_prompt"], float(r.get("peak_prompt") or 0))
    for by_policy in out.values():
        raw = by_policy.get("raw", {}).get("cw_total", math.nan)
        for cell in by_policy.values():
            cell["vs_raw"] = cell["cw_total"] / raw if raw and not math.isnan(raw) else math.nan
    return out


def replay_checks(summary: Mapping[int, Mapping[str, Mapping[str, float]]]) -> list[dict[str, Any]]:
    """What replay can hold Cascade (``cascade-default``) to, per limit.

    No request over the limit, no broken tool pairing, no failed step, and a cache-weighted
    cost (main + fast model) below sending the raw history. ``met`` is None when unknown.
    """
    checks: list[dict[str, Any]] = []
    for limit in sorted(summary):
        cell = summary[limit].get("cascade-default")
        if cell is None:
            continue
        k = f"{limit // 1000}k"
        for name, value, bound, rule in (
            (f"{k}: requests over the limit", cell["over_limit"], 0.0, "== 0"),
            (f"{k}: broken tool pairings", cell["broken_pairings"], 0.0, "== 0"),
            (f"{k}: failed steps", cell["errors"], 0.0, "== 0"),
            (f"{k}: cache-weighted cost vs raw", cell["vs_raw"], 1.0, "< 1 (cheaper than raw)"),
        ):
            if math.isnan(value):
                met = None
            elif rule.startswith("<"):
                met = bool(value < bound)
            else:
                met = bool(value <= bound)
            checks.append(
                {"target": name, "rule": rule, "value": value, "limit": bound, "met": met}
            )
    return checks


LONG_FILES = (1, 2, 4, 6)
"""The long transcripts the issue quotes reference costs for (SOURCES.md order)."""


def issue_targets(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Issue #5's per-file targets for ``cascade-default`` (cost = main + fast, cache-weighted).

    - every file, both limits, both Cascade policies: no request over the limit, no broken pair;
    - 32k, each long file: at most 0.8x the best reference policy (clearing, clearing-5k,
      masking);
    - 128k: at most 1.05x raw where raw fits, else at most 0.8x clearing.
    """
    cost: dict[tuple[int, int, str], float] = {}
    over: dict[tuple[int, int, str], float] = {}
    checks: list[dict[str, Any]] = []
    for r in rows:
        key = (int(r["file"]), int(r["limit"]), str(r["policy"]))
        cost[key] = float(r.get("cache_weighted") or 0) + float(r.get("cache_weighted_fast") or 0)
        over[key] = float(r.get("over_limit") or 0)
        if key[2].startswith("cascade"):
            bad = over[key] + float(r.get("broken_pairings") or 0) + float(r.get("errors") or 0)
            checks.append(
                {
                    "target": f"file {key[0]} {key[1] // 1000}k {key[2]}: over limit,"
                    " broken pairs, errors",
                    "rule": "== 0",
                    "value": bad,
                    "limit": 0.0,
                    "met": bad == 0,
                }
            )
    for (file, limit, policy), value in sorted(cost.items()):
        if policy != "cascade-default":
            continue
        refs = [
            cost[(file, limit, p)]
            for p in ("clearing", "clearing-5k", "masking")
            if (file, limit, p) in cost
        ]
        if limit < 100_000 and file in LONG_FILES and refs:
            ratio, rule, bound = value / min(refs), "<= 0.8x best reference", 0.8
        elif limit >= 100_000 and (file, limit, "raw") in cost:
            if over[(file, limit, "raw")] == 0:
                ratio, rule, bound = value / cost[(file, limit, "raw")], "<= 1.05x raw", 1.05
            elif (file, limit, "clearing") in cost:
                ratio = value / cost[(file, limit, "clearing")]
                rule, bound = "<= 0.8x clearing (raw does not fit)", 0.8
            else:
                continue
        else:
            continue
        checks.append(
            {
                "target": f"file {file} {limit // 1000}k: cost ratio",
                "rule": rule,
                "value": ratio,
                "limit": bound,
                "met": ratio <= bound,
            }
        )
    return checks


_RETRIEVAL_TARGETS = {
    "added_p50_ms": ("new turn with retrieval on: added p50 (ms)", "<= 15 ms"),
    "embedding_rate": ("background embedding, one core (messages/s)", ">= 300"),
}


def retrieval_checks(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Issue 22's two retrieval bars as target rows (``bench.retrieval`` keys them by name)."""
    checks = []
    for key, judged in (data.get("targets") or {}).items():
        name, rule = _RETRIEVAL_TARGETS.get(key, (key, ""))
        checks.append(
            {
                "target": name,
                "rule": rule,
                "value": judged.get("value"),
                "limit": judged.get("bar"),
                "met": judged.get("met"),
            }
        )
    return checks


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
            checks[name] = [*issue_targets(rows), *replay_checks(replay_summary(rows))]
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


# ----------------------------------------------------------------------------- running


def _log(msg: str) -> None:
    print(f"[bench.run {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _run_part(name: str, args: list[str], out: Path) -> dict[str, Any]:
    """Run one part; its JSON counts only if this run wrote it (never a stale one)."""
    cmd = [sys.executable, "-m", *args]
    display = shlex.join(["python", "-m", *(a.replace(str(ROOT) + "/", "") for a in args)])
    _log(f"{name}: {display}")
    json_path = out / f"{name}.json"
    t0 = time.time()
    code = subprocess.call(cmd, cwd=str(ROOT))
    seconds = time.time() - t0
    when = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(t0))
    result: dict[str, Any] = {"command": display, "seconds": seconds, "when": when, "ok": False}
    fresh = json_path.exists() and json_path.stat().st_mtime >= t0
    if code != 0:
        result["error"] = f"exit status {code}"
    elif not fresh:
        result["error"] = f"{json_path.name} was not written"
    else:
        result["ok"] = True
        result["data"] = json.loads(json_path.read_text())
    _log(f"{name}: {'ok' if result['ok'] else result['error']} in {seconds / 60:.1f} min")
    return result


def _existing_part(name: str, out: Path) -> dict[str, Any]:
    """A part's last results as found in ``out`` (``--report-only``): nothing is re-run."""
    path = out / f"{name}.json"
    if not path.exists():
        return {"command": f"python -m bench.{name}", "ok": False, "error": f"no {path.name}"}
    data = json.loads(path.read_text())
    meta = data.get("meta") or {}
    when = meta.get("when") or time.strftime(
        "%Y-%m-%d %H:%M %Z", time.localtime(path.stat().st_mtime)
    )
    return {
        "command": meta.get("command", f"python -m bench.{name}"),
        "seconds": meta.get("wall_s"),
        "when": when,
        "ok": True,
        "data": data,
    }


def _copy(out: Path, pattern: str, dest: Path) -> list[str]:
    """Copy ``out``'s files matching ``pattern`` into ``dest``, a folder beside RESULTS.md
    (charts/, reports/: committed, where bench/out is not); their paths relative to it."""
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for path in sorted(out.glob(pattern)):
        shutil.copy2(path, dest / path.name)
        copied.append(f"{dest.name}/{path.name}")
    return copied


def _git(*args: str) -> str:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.check_output(["git", *args], cwd=str(ROOT), text=True).strip()
    return "unknown"


def _machine() -> str:
    model = platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().splitlines()[0].split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    return f"{platform.system()} {platform.release()}, {model}{mem}"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller samples, well under 10 min")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="the report; its charts go to charts/ beside it",
    )
    parser.add_argument("--out-dir", type=Path, default=OUT, help="where the parts write")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rebuild the report from the JSON already in --out-dir",
    )
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    out: Path = args.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    load_start = [round(x, 2) for x in os.getloadavg()]
    t0 = time.monotonic()
    commands = part_commands(args.quick, out)
    parts: dict[str, dict[str, Any]] = {}
    charts: dict[str, list[str]] = {}
    reports: dict[str, str] = {}
    for name in PARTS:
        if name in args.only:
            parts[name] = (
                _existing_part(name, out)
                if args.report_only
                else _run_part(name, commands[name], out)
            )
            ok = parts[name]["ok"]
            here = args.results.parent
            charts[name] = _copy(out, _CHART_GLOBS[name], here / "charts") if ok else []
            # docs/perf.md quotes figures from the full reports, so they are kept too
            if ok and (report := _copy(out, f"{name}.md", here / "reports")):
                reports[name] = report[0]
    dirty = " (with uncommitted changes)" if _git("status", "--porcelain", "--", "proxy") else ""
    meta = {
        "command": shlex.join(["python", "-m", "bench.run", *args.argv]),
        "when": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": _machine(),
        "nproc": os.cpu_count(),
        "load_start": load_start,
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "commit": _git("rev-parse", "--short", "HEAD") + dirty,
        "python": platform.python_version(),
        "wall_s": time.monotonic() - t0,
        "quick": args.quick,
        "report_only": args.report_only,
        "out_dir": str(out.relative_to(ROOT)) if out.is_relative_to(ROOT) else str(out),
    }
    args.results.write_text(render_results(meta=meta, parts=parts, charts=charts, reports=reports))
    _log(f"wrote {args.results}")
    return 0 if all(p["ok"] for p in parts.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
