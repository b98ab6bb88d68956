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
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.run_report import PARTS, render_results

__all__ = ["part_commands", "main"]

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "RESULTS.md"
QUICK_REPLAY = ("--files", "1", "2", "--limit", "32000")
_CHART_GLOBS = {
    "overhead": "overhead*.png",
    "growth": "growth.png",
    "replay": "replay.png",
    "retrieval": "retrieval*.png",  # none yet: its report is a table
}


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
