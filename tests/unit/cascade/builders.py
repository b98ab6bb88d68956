"""Tiny message builders and a deterministic token counter for the pure-core tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from proxy.cascade.types import Message

__all__ = ["system", "user", "assistant", "assistant_calls", "tool", "count", "conversation"]


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def assistant_calls(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """``assistant_calls(("id1", "grep", {"q": "x"}), ...)``: one step, parallel calls."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(a)}}
            for cid, name, a in calls
        ],
    }


def tool(cid: str, text: str, name: str | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "tool", "tool_call_id": cid, "content": text}
    if name is not None:
        msg["name"] = name
    return msg


def count(msgs: Sequence[Message], /) -> int:
    """Exact, framing-free: a quarter of each message's content length."""
    return sum(len(str(m.get("content") or "")) // 4 for m in msgs)


def conversation(sizes: Sequence[int], name: str = "read_file") -> list[dict[str, Any]]:
    """system, user, then one single-call round per size (result of ``size`` chars), then user."""
    msgs: list[dict[str, Any]] = [system("sys"), user("go")]
    for i, size in enumerate(sizes):
        msgs.append(assistant_calls((f"c{i}", name, {"i": i})))
        msgs.append(tool(f"c{i}", "x" * size))
    msgs.append(user("next"))
    return msgs
