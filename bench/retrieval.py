"""Retrieval: what a new turn costs with it on, and how fast the background embedder goes.

``python -m bench.retrieval [--quick] [--size 10000] [--requests 30] [--out DIR/retrieval.json]``

Two bars (issue 22):

(a) a new turn with retrieval on, in a session of ``--size`` stored messages, adds at most
    15 ms p50 over the same turn with retrieval off. Two sessions get the same synthetic
    history (bench.growth's agent-shaped rounds), one through an agent with retrieval on,
    one through an agent without; each is seeded by one request and compacted, so all but
    the last few messages are outside the prompt and the search covers them all. Then the
    two take turns: each step appends a new user message (a new turn, so retrieval runs),
    resends the whole history and stores the reply. The report gives both medians, their
    difference (the bar) and their ratio.
(b) the builtin model's background embedding keeps up with at least 300 messages a second
    on one core. The proxy runs pinned to one CPU (``sched_setaffinity``, BLAS threads 1).
    Both sessions are seeded with retrieval off; then a hot reload turns it on for the one
    agent and the worker backfills that session alone: the rate is its messages divided by
    the time between the first and the last embedded, read from ``message_embeddings``.
    Its baseline, in the same script, is the builtin embedder alone on the same texts in
    this process (also one core): the ratio says what the claim-store loop costs on top of
    the model.

Set-up as bench.growth: the fake upstream and ``python -m proxy serve`` on a fresh embedded
PostgreSQL, each in its own process. The search's plan is recorded (``EXPLAIN``) so the
report shows whether the HNSW index or the session index served it.

Writes ``retrieval.json`` and ``retrieval.md`` next to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import clean, free_port, machine, out_file
from bench.growth_scenario import FAST_MODEL, build_history, user_turn
from bench.growth_setup import PY, ROOT, Proc, embedded_dsn, stop_postmaster
from bench.retrieval_probes import (
    EMBED_MODEL,
    Client,
    Db,
    embedder_rate,
    explain_search,
    wait_embedded,
)

__all__ = ["run", "render_markdown", "evaluate", "main"]

MODEL = "bench-model"
ON, OFF = "retrieval-on", "retrieval-off"
ADDED_MS_BAR = 15.0
RATE_BAR = 300.0


def _log(msg: str) -> None:
    print(f"[retrieval {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _config(upstream: str, *, on: bool = True) -> dict[str, Any]:
    agent = {"provider": "openai", "model": MODEL, "fastModel": FAST_MODEL}
    return {
        "providers": {"openai": {"baseUrl": upstream, "apiKeyEnv": "OPENAI_API_KEY"}},
        "models": {"default": {"contextLimit": 10_000_000}},
        "agents": {
            "default": {"provider": "openai", "fastModel": FAST_MODEL},
            ON: {**agent, "context": {"retrieval": {"enabled": on}}},
            OFF: agent,
        },
        "embedding": {"provider": "builtin", "model": EMBED_MODEL, "dimensions": 256},
        "context": {"summarize": {"keepRecent": 4}},
    }


def evaluate(result: Mapping[str, Any]) -> dict[str, Any]:
    a, b = result["turns"], result["embedding"]
    return {
        "added_p50_ms": {"value": a["added_p50_ms"], "bar": ADDED_MS_BAR,
                         "met": a["added_p50_ms"] <= ADDED_MS_BAR},
        "embedding_rate": {"value": b["worker_rate"], "bar": RATE_BAR,
                           "met": b["worker_rate"] >= RATE_BAR},
    }  # fmt: skip


def run(args: argparse.Namespace, tmp: Path, logs: Path, started: list[Proc]) -> dict[str, Any]:
    fake_port, port = free_port(), free_port()
    fake = Proc(
        "fake upstream",
        [PY, "-m", "bench.growth", "--serve-upstream", str(fake_port)],
        logs / "retrieval-fake.log",
    )
    fake.start()
    started.append(fake)
    fake_url = f"http://127.0.0.1:{fake_port}"
    fake.wait_ready(f"{fake_url}/v1/models", 30)
    config = tmp / "agents.json"
    config.write_text(json.dumps(_config(f"{fake_url}/v1", on=False)))
    data = tmp / "data"
    env = {
        **os.environ,
        "OPENAI_API_KEY": "x",
        "CASCADE_DATA_DIR": str(data),
        "CASCADE_LOG_LEVEL": "warning",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env.pop("DATABASE_URL", None)
    cmd = [PY, "-m", "proxy", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proxy = Proc("cascade", [*cmd, "--config", str(config)], logs / "retrieval-cascade.log", env)
    proxy.start()
    started.append(proxy)
    base = f"http://127.0.0.1:{port}"
    proxy.wait_ready(f"{base}/readyz", 180)
    assert proxy.proc is not None
    cpu = sorted(os.sched_getaffinity(0))[-1]
    os.sched_setaffinity(proxy.proc.pid, {cpu})  # (b) is "on one core"
    for task in Path(f"/proc/{proxy.proc.pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpu})
    dsn = embedded_dsn(data / "pgdata")
    db = Db(dsn)
    client = Client(base)
    tag = f"{random.randrange(16**6):06x}"
    sids = {ON: f"ret-on-{tag}", OFF: f"ret-off-{tag}"}
    histories = {agent: build_history(args.size - 1, seed=7) for agent in (ON, OFF)}
    try:
        for agent in (ON, OFF):
            _log(f"seeding {sids[agent]} with {args.size - 1} messages")
            client.chat(sids[agent], agent, histories[agent])
            client.compact(sids[agent])
        # retrieval on now: the worker backfills the stored session with nothing else running
        tmp_config = config.with_name("next.json")
        tmp_config.write_text(json.dumps(_config(f"{fake_url}/v1")))
        os.replace(tmp_config, config)
        _log("retrieval on (hot reload); waiting for the background embedding")
        emb = wait_embedded(db, sids[ON], args.size - 1, timeout=args.size / 20 + 60)
        baseline = embedder_rate(histories[ON], batch=64)
        db.fetch("ANALYZE")  # as autovacuum would after the backfill: the plans see the rows
        plan = explain_search(dsn, sids[ON])
        rngs = {agent: random.Random(11) for agent in (ON, OFF)}
        samples: dict[str, list[float]] = {ON: [], OFF: []}
        overhead: dict[str, list[float]] = {ON: [], OFF: []}
        for i in range(args.warmup + args.requests):
            order = (ON, OFF) if i % 2 == 0 else (OFF, ON)
            for agent in order:
                histories[agent].append(user_turn(rngs[agent], 200_000 + i))
                ms, own = client.chat(sids[agent], agent, histories[agent])
                if i >= args.warmup:
                    samples[agent].append(ms)
                    overhead[agent].append(own)
                time.sleep(args.gap_ms / 1000)
        events = db.fetch(
            "SELECT data FROM events WHERE session_id = $1 AND name = 'context.retrieval' "
            "ORDER BY id",
            sids[ON],
        )
    finally:
        db.close()
        client.close()
        proxy.stop()
        stop_postmaster(data / "pgdata")
    on, off = statistics.median(samples[ON]), statistics.median(samples[OFF])
    datas = [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in events]
    return {
        "meta": {
            "command": shlex.join(["python", "-m", "bench.retrieval", *args.argv]),
            "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": machine(),
            "size": args.size,
            "requests": args.requests,
            "warmup": args.warmup,
            "gap_ms": args.gap_ms,
        },
        "turns": {
            "on_p50_ms": round(on, 2),
            "off_p50_ms": round(off, 2),
            "added_p50_ms": round(on - off, 2),
            "ratio": round(on / off, 3),
            "overhead_on_p50_ms": round(statistics.median(overhead[ON]), 2),
            "overhead_off_p50_ms": round(statistics.median(overhead[OFF]), 2),
            "retrieval_took_p50_ms": round(
                statistics.median(d["took_ms"] for d in datas[-args.requests :]), 2
            ),
            "hits_p50": statistics.median(d["hits"] for d in datas[-args.requests :]),
            "errors": sum(1 for d in datas if d.get("error")),
        },
        "embedding": {
            "worker_rate": round(emb["rate"], 1),
            "worker_seconds": emb["seconds"],
            "messages": emb["messages"],
            "embedder_alone_rate": round(baseline, 1),
            "ratio_to_embedder_alone": round(emb["rate"] / baseline, 3),
        },
        "search_plan": plan,
        "samples": samples,
    }


def render_markdown(result: Mapping[str, Any]) -> str:
    t, e, m = result["turns"], result["embedding"], result["meta"]
    met = result["targets"]

    def ok(key: str) -> str:
        return "met" if met[key]["met"] else "NOT met"

    return "\n".join(
        [
            f"# Retrieval ({m['when']}, {m['machine']})",
            "",
            f"`{m['command']}`: a session of {m['size']} stored messages, "
            f"{m['requests']} measured turns each way.",
            "",
            "| | p50 ms |",
            "|---|---|",
            f"| new turn, retrieval off | {t['off_p50_ms']} |",
            f"| new turn, retrieval on | {t['on_p50_ms']} |",
            f"| added (bar <= {ADDED_MS_BAR:g} ms: {ok('added_p50_ms')}) | {t['added_p50_ms']} |",
            f"| ratio on/off | {t['ratio']} |",
            f"| embed + search, as the event reports it | {t['retrieval_took_p50_ms']} |",
            f"| the proxy's own time (X-Cascade-Overhead-Ms), off / on | "
            f"{t.get('overhead_off_p50_ms')} / {t.get('overhead_on_p50_ms')} |",
            "",
            f"Background embedding, one core: {e['worker_rate']} messages/s "
            f"(bar >= {RATE_BAR:g}: {ok('embedding_rate')}); the builtin embedder alone: "
            f"{e['embedder_alone_rate']} messages/s; ratio {e['ratio_to_embedder_alone']}.",
            "",
            "Search plan:",
            "",
            *[f"    {line}" for line in result["search_plan"]],
            "",
        ]
    )


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval")
    parser.add_argument("--quick", action="store_true", help="a small session, few turns")
    parser.add_argument("--size", type=int, default=10_000, help="stored messages per session")
    parser.add_argument("--requests", type=int, default=30, help="measured turns per mode")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--gap-ms", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "retrieval.json")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.size, args.requests, args.warmup = min(args.size, 400), 4, 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    out = out_file(args.out, "retrieval.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    logs = out.parent / "logs"
    logs.mkdir(exist_ok=True)
    started: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="cascade-retrieval-", ignore_cleanup_errors=True) as d:
        try:
            result = run(args, Path(d), logs, started)
        finally:
            for proc in reversed(started):
                proc.stop()
    result["targets"] = evaluate(result)
    out.write_text(json.dumps(clean(result), indent=1))
    markdown = render_markdown(result)
    out.with_suffix(".md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
