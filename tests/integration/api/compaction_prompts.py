"""What the compaction tests send and read back: tool rounds, and the parts of the prompt the
upstream saw (the folded summary, the live messages after it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.history import canonical_message
from tests.integration.api.compaction_stack import words

__all__ = [
    "SUMMARY_CLOSE",
    "SUMMARY_OPEN",
    "assert_paired",
    "canon",
    "first_user_text",
    "has_summary",
    "live_part",
    "prompt_messages",
    "summary_of",
    "tool_round",
]

SUMMARY_OPEN = "<conversation_summary>"
SUMMARY_CLOSE = "</conversation_summary>"


def prompt_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(body.get("messages") or [])


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


def first_user_text(body: Mapping[str, Any]) -> str:
    for m in prompt_messages(body):
        if m.get("role") == "user":
            return _text(m.get("content"))
    return ""


def has_summary(body: Mapping[str, Any]) -> bool:
    return any(SUMMARY_OPEN in _text(m.get("content")) for m in prompt_messages(body))


def summary_of(body: Mapping[str, Any]) -> str | None:
    """The briefing folded into the prompt, or None."""
    for m in prompt_messages(body):
        text = _text(m.get("content"))
        if text.startswith(SUMMARY_OPEN):
            return text[len(SUMMARY_OPEN) : text.index(SUMMARY_CLOSE)].strip()
    return None


def live_part(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The prompt without the folded summary, canonicalised for comparison with a history."""
    out = []
    for m in prompt_messages(body):
        text = m.get("content")
        if isinstance(text, str) and text.startswith(SUMMARY_OPEN):
            rest = text.split(SUMMARY_CLOSE, 1)[1].lstrip("\n")
            if not rest:
                continue  # a user message inserted only to carry the summary
            m = {**m, "content": rest}
        out.append(canonical_message(m))
    return out


def canon(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [canonical_message(m) for m in messages]


def tool_round(n: int, size: int = 350) -> list[dict[str, Any]]:
    """An assistant message with two tool calls and their two results."""
    calls = [
        {
            "id": f"call_{n}{k}",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "src/mod_{n}{k}.py"}}'},
        }
        for k in "ab"
    ]
    results = [
        {
            "role": "tool",
            "tool_call_id": f"call_{n}{k}",
            "content": f"contents of src/mod_{n}{k}.py: " + words(size, f"r{n}{k}"),
        }
        for k in "ab"
    ]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


def assert_paired(messages: Sequence[Mapping[str, Any]]) -> None:
    """Every tool result directly follows the assistant round that called it, and every call
    of a round is answered before anything else."""
    pending: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            assert m.get("tool_call_id") in pending, f"orphan tool result {m.get('tool_call_id')}"
            pending.discard(m["tool_call_id"])
            continue
        assert not pending, f"unanswered tool calls {pending}"
        pending = {c["id"] for c in m.get("tool_calls") or ()}
    assert not pending, f"unanswered tool calls {pending}"
