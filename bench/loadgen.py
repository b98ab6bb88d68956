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

The HTTP/1.1 client is a few dozen lines over ``asyncio`` streams (uvloop when installed):
cheaper than any client library, so on a 2-core box the generator steals as little CPU as it
can from the servers it measures, and it timestamps every chunk as it leaves the socket. For
the same reason bodies are written with orjson when installed: it writes the ~200 KB agent
request an order of magnitude faster than the stdlib, on the cores the servers share. It
only talks to loopback, and every run is bounded in both time and request count.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import math
import random
import re
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "SCENARIOS",
    "CONVERSATIONS",
    "Workload",
    "percentile",
    "summarize",
    "ratio",
    "median",
    "split_sse",
    "make_workload",
    "run",
    "main",
]

SCENARIOS = ("tiny", "stream", "large")
CONVERSATIONS = ("distinct", "same")
MODEL = "bench-model"
MAX_DURATION = 120.0
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_FRAME_END = re.compile(rb"\r?\n\r?\n")

try:
    from orjson import dumps as _dumps
except ImportError:  # pragma: no cover - the bench installs it with Cascade

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


# ----------------------------------------------------------------------------- pure stats


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between closest ranks (numpy's
    default), so p50 of an even-sized sample is the mean of the middle two. NaN when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    """Median ignoring NaNs (a round that produced no sample must not poison the others)."""
    kept = [v for v in values if not math.isnan(v)]
    return percentile(kept, 50) if kept else math.nan


def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, mean, p50, p90, p99 and max of a sample; NaN statistics for an empty one."""
    if not values:
        nan = math.nan
        return {"n": 0, "mean": nan, "p50": nan, "p90": nan, "p99": nan, "max": nan}
    return {
        "n": len(values),
        "mean": sum(values) / len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values),
    }


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when either is missing or the denominator is not positive,
    so a target that could not be measured reads as unknown rather than as met or failed."""
    if math.isnan(numerator) or math.isnan(denominator) or denominator <= 0:
        return math.nan
    return numerator / denominator


def split_sse(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE frames in ``buffer`` (either line ending) and the unfinished rest."""
    frames: list[bytes] = []
    start = 0
    for match in _FRAME_END.finditer(buffer):
        frames.append(buffer[start : match.start()])
        start = match.end()
    return frames, buffer[start:]


# ----------------------------------------------------------------------------- workload


def _prose(rng: random.Random, chars: int) -> str:
    words = (
        "the",
        "request",
        "handler",
        "returns",
        "session",
        "value",
        "error",
        "config",
        "token",
        "window",
        "cache",
        "retry",
        "upstream",
        "stream",
        "message",
        "result",
    )
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(words)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def _code(rng: random.Random, chars: int) -> str:
    lines: list[str] = []
    size = 0
    n = 0
    while size < chars:
        n += 1
        line = f"{n:5d}\tdef handler_{rng.randrange(10**6)}(request, *, retries={n % 7}):"
        line += f"  # {_prose(rng, 40)}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:chars]


_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name, desc in (
        ("read_file", "Read a file from the workspace."),
        ("run_tests", "Run the test suite for a path."),
        ("grep", "Search the workspace for a pattern."),
    )
]


@dataclass(slots=True)
class Workload:
    """A scenario's request template: a base conversation and how a turn extends it."""

    scenario: str
    base: list[dict[str, Any]]
    extra: dict[str, Any]
    turns_per_session: int
    tool_result: str = ""
    follow_up: str = "Good. Now do the next step."
    stream: bool = False

    def body(self, messages: list[dict[str, Any]]) -> bytes:
        payload = {"model": MODEL, "messages": messages, **self.extra}
        return _dumps(payload)

    def next_turn(self, reply: dict[str, Any]) -> list[dict[str, Any]]:
        """What the agent appends after ``reply``: the reply itself and its answer."""
        calls = reply.get("tool_calls") or []
        if calls:
            results = [
                {"role": "tool", "tool_call_id": c["id"], "content": self.tool_result}
                for c in calls
            ]
            return [reply, *results]
        return [reply, {"role": "user", "content": self.follow_up}]

    def distinct(self, session: str) -> Workload:
        """This workload as the conversation of ``session``: a short digest of the session's
        name is written over the start of every message's text (each text keeps its length)
        and appended to the opening tool calls' ids, so different sessions share no message
        and no prefix. Costs tens of microseconds, once per session."""
        tag = base64.b32encode(hashlib.blake2b(session.encode(), digest_size=5).digest())
        tag = tag.decode().lower()
        mark = f"({tag}) "  # not "[" or "{": a result that starts so is tried as JSON
        base = []
        for msg in self.base:
            msg = dict(msg)
            if msg.get("content"):
                msg["content"] = _tagged(msg["content"], mark)
            if msg.get("tool_calls"):
                msg["tool_calls"] = [
                    {**call, "id": f"{call['id']}_{tag}"} for call in msg["tool_calls"]
                ]
            if "tool_call_id" in msg:
                msg["tool_call_id"] = f"{msg['tool_call_id']}_{tag}"
            base.append(msg)
        return Workload(
            self.scenario,
            base,
            self.extra,
            self.turns_per_session,
            tool_result=_tagged(self.tool_result, mark) if self.tool_result else "",
            follow_up=_tagged(self.follow_up, mark),
            stream=self.stream,
        )


def _tagged(text: str, mark: str) -> str:
    """``mark`` written over the start of ``text``, or before it when ``text`` is shorter."""
    return mark + text[len(mark) :]


def make_workload(scenario: str, seed: int = 7) -> Workload:
    """tiny/stream: a 2-message chat growing to 16 messages (< 2 KB); large: a 36-message
    tool-calling transcript (~190 KB, one 30 KB result over the truncation cap) growing by one
    round (~5 KB) per turn, 5 turns per session, so requests average 40 messages / ~200 KB."""
    rng = random.Random(seed)
    if scenario in ("tiny", "stream"):
        base = [
            {
                "role": "system",
                "content": "You are a concise coding assistant. " + _prose(rng, 160),
            },
            {"role": "user", "content": "Fix the failing test in tests/test_app.py, please."},
        ]
        extra: dict[str, Any] = {"max_tokens": 256}
        if scenario == "stream":
            extra["stream"] = True
        return Workload(scenario, base, extra, turns_per_session=8, stream=scenario == "stream")
    if scenario != "large":
        raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    base: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an autonomous software agent. " + _prose(rng, 4000)},
        {
            "role": "user",
            "content": "The checkout service returns 500 on empty carts. " + _prose(rng, 600),
        },
    ]
    for i in range(17):
        call_id = f"call_base_{i:03d}"
        name = ("read_file", "grep", "run_tests")[i % 3]
        base.append(
            {
                "role": "assistant",
                "content": _prose(rng, 120) if i % 4 == 0 else None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": name,
                            "arguments": json.dumps({"path": f"src/mod_{i}.py"}),
                        },
                    }
                ],
            }
        )
        size = 30_000 if i == 5 else 9_700
        base.append({"role": "tool", "tool_call_id": call_id, "content": _code(rng, size)})
    extra = {"tools": _TOOLS, "tool_choice": "auto", "max_tokens": 1024}
    return Workload("large", base, extra, turns_per_session=5, tool_result=_code(rng, 5_000))


# ----------------------------------------------------------------------------- client


class _Closed(Exception):
    """The server closed the connection; reconnect and carry on."""


@dataclass(slots=True)
class _Sample:
    start: float
    end: float
    status: int
    ttfc: float = math.nan
    span: float = math.nan
    gaps: list[float] = field(default_factory=list)
    frames: int = 0


@dataclass(slots=True)
class _Conn:
    host: str
    port: int
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, limit=1 << 20
            )
        return self.reader, self.writer

    def drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise _Closed from exc
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
    return status, headers


async def _body_chunks(
    reader: asyncio.StreamReader, headers: dict[str, str]
) -> AsyncIterator[bytes]:
    if "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
        return
    if "chunked" not in headers.get("transfer-encoding", ""):
        yield await reader.read()  # close-delimited body
        return
    while True:
        size = int((await reader.readline()).split(b";", 1)[0], 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            return
        chunk = await reader.readexactly(size + 2)
        yield chunk[:-2]


def _reply_from_frames(frames: list[bytes]) -> dict[str, Any]:
    text: list[str] = []
    for frame in frames:
        if not frame.startswith(b"data: {"):
            continue
        for choice in json.loads(frame[6:]).get("choices") or []:
            text.append((choice.get("delta") or {}).get("content") or "")
    return {"role": "assistant", "content": "".join(text)}


async def _request(conn: _Conn, head: bytes, body: bytes, stream: bool) -> tuple[_Sample, Any]:
    reader, writer = await conn.open()
    start = time.perf_counter()
    writer.write(head + body)
    await writer.drain()
    status, headers = await _read_head(reader)
    sample = _Sample(start, start, status)
    parts: list[bytes] = []
    frames: list[bytes] = []
    rest = b""
    last = math.nan
    async for chunk in _body_chunks(reader, headers):
        now = time.perf_counter()
        if not stream:
            parts.append(chunk)
            continue
        got, rest = split_sse(rest + chunk)
        for frame in got:
            if not frame.startswith(b"data:"):
                continue
            if math.isnan(sample.ttfc):
                sample.ttfc = now - start
            else:
                sample.gaps.append(now - last)
            last = now
            frames.append(frame)
    sample.end = time.perf_counter()
    sample.frames = len(frames)
    sample.span = last - start - sample.ttfc
    if headers.get("connection", "").lower() == "close":
        conn.drop()
    if status != 200:
        return sample, None
    if stream:
        return sample, _reply_from_frames(frames)
    return sample, json.loads(b"".join(parts))["choices"][0]["message"]


@dataclass(slots=True)
class _Shared:
    deadline: float
    measure_from: float
    budget: int
    samples: list[_Sample] = field(default_factory=list)
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
    conn = _Conn(parts.hostname or "127.0.0.1", parts.port or 80)
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
            sample, reply = await _request(conn, head, body, work.stream)
        except (OSError, _Closed, asyncio.IncompleteReadError, ValueError, LookupError) as exc:
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
