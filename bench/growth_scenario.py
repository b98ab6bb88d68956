"""The session-growth scenario: its sizes, modes and models, and the synthetic history.

:mod:`bench.growth` seeds sessions with :func:`build_history` and extends them with
:func:`user_turn`; :mod:`bench.retrieval` seeds its sessions the same way. The text is words,
so a BPE tokenizer sees prose, not repeated characters.
"""

from __future__ import annotations

import json
import random
from typing import Any

from bench.common import words_text

__all__ = [
    "SIZES",
    "MODES",
    "TABLES",
    "CONTEXT_LIMIT",
    "MODEL",
    "FAST_MODEL",
    "BRIEFING",
    "build_history",
    "user_turn",
]

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


def _text(rng: random.Random, chars: int) -> str:
    return words_text(rng, _WORDS, chars)


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
