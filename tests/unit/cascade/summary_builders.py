"""Tiny message builders and a deterministic token counter for the summary/overflow tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from proxy.cascade.types import Message

__all__ = [
    "assistant",
    "assistant_calls",
    "conversations",
    "count",
    "legacy_call",
    "legacy_result",
    "system",
    "tool",
    "user",
]


def count(msgs: Sequence[Message]) -> int:
    return sum(len(str(m.get("content") or "")) // 4 for m in msgs)


def system(text: str = "You are helpful.") -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def assistant_calls(*calls: tuple[str, str, dict[str, Any]], text: str = "") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ],
    }


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


@st.composite
def conversations(draw: st.DrawFn, *, max_turns: int = 8) -> list[dict[str, Any]]:
    """A valid agent transcript: system, then turns of user + assistant text or tool rounds."""
    msgs: list[dict[str, Any]] = [system("s" * draw(st.integers(0, 40)))]
    ids = iter(range(10_000))
    for _ in range(draw(st.integers(1, max_turns))):
        msgs.append(user("u" * draw(st.integers(0, 120))))
        for _ in range(draw(st.integers(0, 3))):
            calls = [f"c{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            msgs.append(assistant_calls(*((c, "grep", {"q": c}) for c in calls)))
            msgs.extend(tool(c, "t" * draw(st.integers(0, 200))) for c in calls)
        if draw(st.booleans()):
            msgs.append(assistant("a" * draw(st.integers(0, 80))))
    return msgs


def legacy_call(name: str, args: dict[str, Any], text: str = "") -> dict[str, Any]:
    """An assistant message of OpenAI's deprecated function calling: one ``function_call``."""
    return {
        "role": "assistant",
        "content": text or None,
        "function_call": {"name": name, "arguments": json.dumps(args)},
    }


def legacy_result(name: str, text: str) -> dict[str, Any]:
    """The ``role: "function"`` message answering a ``legacy_call`` (it carries no id)."""
    return {"role": "function", "name": name, "content": text}
