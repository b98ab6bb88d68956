"""The fake provider and the configs of the end-to-end property replay (test_e2e_properties.py).

:class:`ReplayModel` answers the fake upstream's chat requests: the agent's model gets the
recorded assistant message of the step being replayed, the fast model a five-section briefing
(or, asked for ``memory_facts``, a fact list). Every few steps the agent's model first calls
``read_tool_output`` on a handle its prompt names, as a model would; the proxy answers that
call itself and asks again, and the model then gives the recorded answer, so the client
sees one answer. :func:`context_config` builds the two passes' ``context`` blocks.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.cascade.tokens import make_counter
from tests.fakes.replies import RecordedRequest, Reply, reply, tool_call

__all__ = [
    "renumbered",
    "tools_of",
    "COUNT",
    "FAST",
    "HANDLE",
    "MAIN",
    "READ_PREFIX",
    "ReplayModel",
    "context_config",
    "handles_in",
    "text_of",
]

FAST = "fast-model"
MAIN = "gpt-e2e"
READ_PREFIX = "e2e_read_"
"""The id of every ``read_tool_output`` call the fake model makes: what tells its second
request (the proxy's internal round) from a new step."""

HANDLE = re.compile(r"read_tool_output\((\{[^()]*?\})\)")
COUNT = make_counter(None)
"""The provider's count of a prompt: the proxy's own estimate (characters over four, tool
calls and framing included), so the ratio it calibrates settles near 1 and a prompt that
fits by its count fits by the provider's."""


def text_of(content: Any) -> str:
    """A message content's text: a string as is, a list of parts' texts joined."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return str(content or "")


def handles_in(text: str) -> list[dict[str, Any]]:
    """The JSON arguments of every ``read_tool_output(...)`` the text names."""
    out = []
    for m in HANDLE.finditer(text):
        try:
            args = json.loads(m.group(1))
        except ValueError:
            continue
        if isinstance(args, dict) and isinstance(args.get("id"), str):
            out.append(args)
    return out


def _briefing(n: int) -> str:
    return (
        f"## Objective\nReplay the recorded agent run (briefing {n}).\n\n"
        "## Decisions & Facts\n- the transcript is replayed step by step\n\n"
        "## Files & State\n(none)\n\n## Open Tasks\n- keep answering as recorded\n\n"
        f"## Next Step\ncontinue with step {n}"
    )


class ReplayModel:
    """The fake's responder (set as ``FakeUpstream.default``); thread-safe, as the fake
    calls it on its own thread while the summariser's calls may overlap a step's."""

    def __init__(self, read_every: int) -> None:
        self.read_every = read_every
        self.answer: Mapping[str, Any] = {"role": "assistant", "content": "ok"}
        self.step = 0
        self.reads: list[dict[str, Any]] = []
        """Each read made: ``{"step", "args", "call_id"}``."""
        self.fast_calls = 0
        self._lock = threading.Lock()

    def __call__(self, req: RecordedRequest) -> Reply:
        body = req.json
        if body.get("model") == FAST:
            with self._lock:
                self.fast_calls += 1
                n = self.fast_calls
            if "memory_facts" in json.dumps(body.get("response_format") or {}):
                return reply(json.dumps({"facts": [f"The replay's compaction {n} happened."]}))
            return reply(_briefing(n))
        messages: Sequence[Mapping[str, Any]] = body.get("messages") or []
        usage = (COUNT(messages), 20)
        last = messages[-1] if messages else {}
        if last.get("role") == "tool" and str(last.get("tool_call_id")).startswith(READ_PREFIX):
            return self._recorded(usage)
        offered = any(
            (t.get("function") or {}).get("name") == "read_tool_output"
            for t in body.get("tools") or []
        )
        if offered and self.read_every and self.step % self.read_every == 0:
            args = self._pick(messages)
            if args is not None:
                call_id = f"{READ_PREFIX}{self.step}"
                self.reads.append({"step": self.step, "args": args, "call_id": call_id})
                call = tool_call("read_tool_output", args, id=call_id)
                return reply(None, tool_calls=[call], usage=usage)
        return self._recorded(usage)

    def _recorded(self, usage: tuple[int, int]) -> Reply:
        msg = self.answer
        return reply(msg.get("content"), tool_calls=msg.get("tool_calls") or None, usage=usage)

    def _pick(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
        """The newest handle the prompt names (a cut's with its slice, else a page of 900
        chars from 100 in), else a page of the newest tool result read from its message."""
        for m in reversed(messages):
            found = handles_in(text_of(m.get("content")))
            if found:
                args = dict(found[-1])
                if "offset" not in args:
                    args.update(offset=100, limit=900)
                return args
        for m in reversed(messages):
            if m.get("role") == "tool" and m.get("tool_call_id"):
                return {"id": m["tool_call_id"], "offset": 0, "limit": 600}
        return None


def context_config(limit: int, *, extras: bool) -> dict[str, Any]:
    """Every stage on at small limits: cut at a quarter of the window (in chars, about a
    sixteenth in tokens), evict early, summarise at 60 %; ``extras`` turns on recitation,
    retrieval (every hit kept: the fake's vectors score at random) and memory promotion."""
    ctx: dict[str, Any] = {
        "toolOutput": {"maxChars": limit // 4, "persistRaw": True},
        "eviction": {
            "enabled": True,
            "atFraction": 0.3,
            "keepRecentRounds": 2,
            "clearAtLeast": limit // 20,
            "minResultTokens": 100,
        },
        "summarize": {
            "enabled": True,
            "softFraction": 0.6,
            "hardFraction": 0.9,
            "keepRecent": 4,
        },
    }
    if extras:
        ctx["recitation"] = {"enabled": True}
        ctx["retrieval"] = {"enabled": True, "minScore": -1.0, "maxResults": 2}
        ctx["memoryPromotion"] = {"mode": "auto"}
    return ctx


def renumbered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript as a client that numbers its calls ``call_0``, ``call_1`` … afresh in
    every assistant message sends it: ids come back, and each names several results."""
    out: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    for m in messages:
        calls = m.get("tool_calls") or []
        if calls:
            ids = {c["id"]: f"call_{k}" for k, c in enumerate(calls)}
            m = {**m, "tool_calls": [{**c, "id": ids[c["id"]]} for c in calls]}
        elif m.get("role") == "tool":
            m = {**m, "tool_call_id": ids.get(m["tool_call_id"], m["tool_call_id"])}
        out.append(m)
    return out


def tools_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = sorted(
        {c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    ) or ["noop"]
    schema = {"type": "object", "properties": {}}
    return [{"type": "function", "function": {"name": n, "parameters": schema}} for n in names]
