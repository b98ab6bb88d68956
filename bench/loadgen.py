"""Closed-loop load generator for the overhead benchmark; runs in its own process.

``python -m bench.loadgen --url http://127.0.0.1:PORT --scenario tiny|stream|large
--concurrency N --duration S [--warmup S] [--max-requests N] [--session-prefix P]
[--conversations distinct|same]``

prints one JSON object (see :func:`run`). Each worker is one agent: it holds one keep-alive
connection, names its session with ``X-Session-Id``, and grows its conversation the way an agent
does: it appends the assistant message it got back (a ``tool_calls`` message answered with a
tool result in ``large``, a text answered by a short user turn otherwise) and rolls over to a
fresh session after a few turns so request sizes stay put.

By default every session is its own conversation (``distinct``): a digest of the session's id
is written over the start of every message the generator sends (and into the ids of the
opening tool calls), so no two sessions share a message body or a prefix of the
conversation, while every request keeps its shape and, within a few bytes, its size. That is
what a proxy serving many users sees, and what a per-process cache keyed by content (the
ingest memo, a per-text line index) must be measured against: with one conversation in every
session such a cache answers nearly every request, which no real traffic does.
``--conversations same`` sends the one conversation in every session, as this generator did
before; it measures the best case of those caches (a retried or forked conversation, many
sessions opened by one prompt).

The HTTP/1.1 client (:mod:`bench.loadgen_client`, uvloop when installed) is a few dozen
lines over ``asyncio`` streams, and the workloads (:mod:`bench.loadgen_workload`) are written
with orjson when installed, both so that on a 2-core box the generator steals as little CPU as
it can from the servers it measures. It only talks to loopback, and every run is bounded in
both time and request count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from bench.common import summarize
from bench.loadgen_client import Closed, Conn, Sample, request
from bench.loadgen_workload import SCENARIOS, Workload, make_workload

__all__ = ["CONVERSATIONS", "run", "main"]

CONVERSATIONS = ("distinct", "same")
MAX_DURATION = 120.0
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(slots=True)
class _Shared:
    deadline: float
    measure_from: float
    budget: int
    samples: list[Sample] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    sizes: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


async def _worker(
    wid: int,
    url: str,
    template: Workload,
    prefix: str,
    api_key: str,
    shared: _Shared,
    distinct: bool = True,
) -> None:
    parts = urlsplit(url)
    conn = Conn(parts.hostname or "127.0.0.1", parts.port or 80)
    path = (parts.path.rstrip("/") or "") + "/v1/chat/completions"

    def start(session_no: int) -> tuple[str, Workload]:
        session = f"{prefix}-w{wid}-s{session_no}"
        return session, template.distinct(session) if distinct else template

    session_no = 0
    session, work = start(session_no)
    messages = list(work.base)
    turn = 0
    while time.perf_counter() < shared.deadline and shared.budget > 0:
        shared.budget -= 1
        body = work.body(messages)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {conn.host}:{conn.port}\r\n"
            f"Content-Type: application/json\r\nAuthorization: Bearer {api_key}\r\n"
            f"X-Session-Id: {session}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        try:
            sample, reply = await request(conn, head, body, work.stream)
        except (OSError, Closed, asyncio.IncompleteReadError, ValueError, LookupError) as exc:
            shared.errors[type(exc).__name__] += 1
            conn.drop()
            await asyncio.sleep(0.01)
            continue
        if shared.measure_from <= sample.end <= shared.deadline:
            shared.samples.append(sample)
            shared.sizes.append(len(body))
            shared.lengths.append(len(messages))
        if reply is None:
            shared.errors[f"http_{sample.status}"] += 1
        turn += 1
        if reply is None or turn >= work.turns_per_session:
            session_no, turn = session_no + 1, 0
            session, work = start(session_no)
            messages = list(work.base)
        else:
            messages = messages + work.next_turn(reply)
    conn.drop()


async def run(
    url: str,
    scenario: str,
    *,
    concurrency: int,
    duration: float,
    warmup: float = 0.5,
    max_requests: int = 200_000,
    session_prefix: str = "lg",
    api_key: str = "bench-key",
    on_phase: Callable[[str], None] | None = None,
    conversations: str = "distinct",
) -> dict[str, Any]:
    """Drive ``concurrency`` agents at ``url`` for ``warmup + duration`` seconds and report the
    requests that finished inside the measured window: ``rps``, ``latency_ms`` (summary), and
    for streams ``ttfc_ms`` (first data frame), ``gap_ms`` (between data frames) and
    ``span_ms`` (first to last data frame: near 0 means the stream was buffered and arrived in
    one piece). ``on_phase("start"|"end")`` is called as the window opens and closes so a
    caller can sample the target's CPU over exactly that window; ``cpu_s`` is the generator's
    own CPU over the same window. ``conversations`` is ``distinct`` (every session its own
    conversation) or ``same`` (one conversation in every session); see the module docstring."""
    if conversations not in CONVERSATIONS:
        raise ValueError(f"conversations must be one of {', '.join(CONVERSATIONS)}")
    host = urlsplit(url).hostname
    if host not in _LOOPBACK:
        raise ValueError(f"loadgen only talks to loopback, not {host!r}")
    duration = min(duration, MAX_DURATION)
    work = make_workload(scenario)
    now = time.perf_counter()
    shared = _Shared(now + warmup + duration, now + warmup, max_requests)
    cpu: list[float] = []

    async def phases() -> None:
        for name, at in (("start", shared.measure_from), ("end", shared.deadline)):
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            cpu.append(time.process_time())
            if on_phase is not None:
                on_phase(name)

    await asyncio.gather(
        phases(),
        *(
            _worker(i, url, work, session_prefix, api_key, shared, conversations == "distinct")
            for i in range(concurrency)
        ),
    )
    ok = [s for s in shared.samples if s.status == 200]
    result: dict[str, Any] = {
        "scenario": scenario,
        "conversations": conversations,
        "concurrency": concurrency,
        "duration_s": duration,
        "requests": len(shared.samples),
        "ok": len(ok),
        "errors": dict(shared.errors),
        "rps": len(ok) / duration,
        "cpu_s": cpu[1] - cpu[0] if len(cpu) == 2 else math.nan,
        "latency_ms": summarize([(s.end - s.start) * 1000 for s in ok]),
        "request_bytes_mean": sum(shared.sizes) / len(shared.sizes) if shared.sizes else 0,
        "messages_mean": sum(shared.lengths) / len(shared.lengths) if shared.lengths else 0,
    }
    if work.stream:
        result["ttfc_ms"] = summarize([s.ttfc * 1000 for s in ok if not math.isnan(s.ttfc)])
        result["gap_ms"] = summarize([g * 1000 for s in ok for g in s.gaps])
        result["frames_mean"] = sum(s.frames for s in ok) / len(ok) if ok else 0
        result["span_ms"] = summarize([s.span * 1000 for s in ok if not math.isnan(s.span)])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="base URL on loopback, no /v1")
    parser.add_argument("--scenario", choices=SCENARIOS, required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--max-requests", type=int, default=200_000)
    parser.add_argument("--session-prefix", default=f"lg{random.randrange(16**6):06x}")
    parser.add_argument("--api-key", default="bench-key", help="sent as the bearer token")
    parser.add_argument(
        "--conversations",
        choices=CONVERSATIONS,
        default="distinct",
        help="distinct: every session its own conversation; same: one in every session",
    )
    parser.add_argument(
        "--phase-markers", action="store_true", help="print phase:start/phase:end to stderr"
    )
    args = parser.parse_args(argv)

    def mark(name: str) -> None:
        sys.stderr.write(f"phase:{name}\n")
        sys.stderr.flush()

    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    result = runner(
        run(
            args.url,
            args.scenario,
            concurrency=args.concurrency,
            duration=args.duration,
            warmup=args.warmup,
            max_requests=args.max_requests,
            session_prefix=args.session_prefix,
            api_key=args.api_key,
            on_phase=mark if args.phase_markers else None,
            conversations=args.conversations,
        )
    )
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
