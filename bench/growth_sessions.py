"""The session-growth measurement: sessions driven through the proxy, timed and counted.

:func:`latency_rounds` times requests in fresh sessions of every size and mode, interleaved;
:func:`rows_pass` counts the rows PostgreSQL reads per request (see :mod:`bench.growth`).
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import time
from dataclasses import dataclass
from typing import Any

from bench.common import percentile
from bench.growth_report import rows_read
from bench.growth_scenario import MODEL, TABLES, build_history, user_turn
from bench.growth_setup import Cpu, Stats, log

__all__ = ["Driver", "latency_rounds", "rows_pass"]


@dataclass(slots=True)
class _Session:
    sid: str
    mode: str
    size: int
    history: list[dict[str, Any]]
    rng: random.Random
    chars: int
    turns: int = 0


class Driver:
    """The client: seeds, compacts and steps sessions through the proxy, one keep-alive
    connection, ``gap_s`` between requests."""

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


def latency_rounds(drv: Driver, args: argparse.Namespace, cpu: Cpu) -> list[dict[str, Any]]:
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
            log(
                f"round {rnd + 1}/{args.rounds} {mode:9s} {size:>5} messages: "
                f"seed {seed_ms:7.1f} ms, p50 {p50:7.1f} ms"
            )
    return samples


def rows_pass(drv: Driver, args: argparse.Namespace, stats: Stats) -> list[dict[str, Any]]:
    sessions = [
        _new_session(m, n, "rows", args.chars, seed=n + 17) for m in args.modes for n in args.sizes
    ]
    for s in sessions:
        drv.seed(s)
        for _ in range(args.warmup):
            drv.step(s)
    stats.analyze()  # settle the planner's view of the freshly loaded tables
    log(f"rows pass: waiting {args.settle:.0f} s for the statistics to settle")
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
        log(
            f"rows pass {s.mode:9s} {s.size:>5} messages: "
            f"{sum(delta.values()) / args.rows_requests:9.1f} rows read per request {delta}"
        )
        before = after
    return out
