"""The load generator's workloads: each scenario's base conversation and how a turn extends it.

``tiny`` and ``stream`` are a short chat; ``large`` is a tool-calling agent transcript of about
200 KB. :meth:`Workload.distinct` makes a session its own conversation (see
:mod:`bench.loadgen`). Bodies are written with orjson when installed: it writes the ~200 KB
agent request an order of magnitude faster than the stdlib, on the cores the servers share.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from bench.common import words_text

__all__ = ["SCENARIOS", "MODEL", "Workload", "make_workload"]

SCENARIOS = ("tiny", "stream", "large")
MODEL = "bench-model"

try:
    from orjson import dumps as _dumps
except ImportError:  # pragma: no cover - the bench installs it with Cascade

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


_PROSE_WORDS = (
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


def _prose(rng: random.Random, chars: int) -> str:
    return words_text(rng, _PROSE_WORDS, chars)


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
