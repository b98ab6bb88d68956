"""Reference context policies, implemented from their published descriptions.

Each policy turns one step's full recorded history into the prompt that would be sent. A policy
object is made per session (:func:`make_policy`) because tool-result clearing remembers what it
cleared, as a client-side implementation does; call it once per step, in order.

- ``raw``: no management; the prompt is the history.
- ``clearing``: Anthropic's ``clear_tool_uses_20250919`` (context-editing docs). When the prompt
  (with earlier clearings applied) exceeds ``trigger`` input tokens (here half the model's
  limit), the oldest tool results are replaced by a placeholder, keeping the most recent
  ``keep`` (3) tool uses; tool inputs are kept (``clear_tool_inputs: false``). Cleared results
  stay cleared on later steps. ``clear_at_least`` defaults to none, as in the API: every
  activation clears. ``clearing-5k`` is the docs' example ``clear_at_least: 5000``: an activation
  that cannot reclaim 5000 tokens is skipped, which batches clearings and so keeps more of the
  cached prefix.
- ``masking``: observation masking as in "The Complexity Trap" (Lindenbauer et al., 2025), which
  uses SWE-agent's last-N-observations processor: tool results older than the last ``window``
  (10) turns are replaced by ``Old environment output: (N lines omitted)``. It is stateless, so
  one more result is masked at every step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "POLICIES",
    "CLEARED_PLACEHOLDER",
    "Policy",
    "Raw",
    "ToolResultClearing",
    "ObservationMasking",
    "make_policy",
]

Message = Mapping[str, Any]
Counter = Callable[[Sequence[Message]], int]

POLICIES = ("raw", "clearing", "clearing-5k", "masking")
CLEARED_PLACEHOLDER = "[Tool result cleared to save context]"


def _with_content(message: Message, content: str) -> dict[str, Any]:
    out = dict(message)
    out["content"] = content
    return out


def _tool_results(messages: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("role") == "tool"]


class Policy:
    """A per-session prompt policy: ``policy(history) -> prompt``."""

    name = "policy"

    def __call__(self, history: Sequence[Message]) -> list[Message]:
        raise NotImplementedError


class Raw(Policy):
    name = "raw"

    def __call__(self, history: Sequence[Message]) -> list[Message]:
        """The prompt is the recorded history, unchanged."""
        return list(history)


@dataclass
class ToolResultClearing(Policy):
    """Client-side ``clear_tool_uses``: sticky clearing of all but the last ``keep`` tool uses."""

    count: Counter
    trigger: int
    keep: int = 3
    clear_at_least: int | None = None
    placeholder: str = CLEARED_PLACEHOLDER
    cleared: set[str] = field(default_factory=set)
    activations: int = 0
    name = "clearing"

    def _apply(self, history: Sequence[Message]) -> list[Message]:
        return [
            _with_content(m, self.placeholder)
            if m.get("role") == "tool" and str(m.get("tool_call_id")) in self.cleared
            else m
            for m in history
        ]

    def __call__(self, history: Sequence[Message]) -> list[Message]:
        """Clear oldest-first once the prompt is over ``trigger``, if it reclaims enough.

        A tool use is one tool call and its result; the last ``keep`` results of the history
        are never cleared. Clearing never removes a message, so pairing is preserved.
        """
        prompt = self._apply(history)
        if self.count(prompt) <= self.trigger:
            return prompt
        results = _tool_results(history)
        candidates = results[: max(0, len(results) - self.keep)]
        fresh = [i for i in candidates if str(history[i].get("tool_call_id")) not in self.cleared]
        if not fresh:
            return prompt
        if self.clear_at_least is not None:
            reclaim = sum(
                self.count([history[i]]) - self.count([_with_content(history[i], self.placeholder)])
                for i in fresh
            )
            if reclaim < self.clear_at_least:
                return prompt
        self.cleared.update(str(history[i].get("tool_call_id")) for i in fresh)
        self.activations += 1
        return self._apply(history)


@dataclass
class ObservationMasking(Policy):
    """Keep the tool results of the last ``window`` assistant turns; mask the older ones."""

    window: int = 10
    name = "masking"

    def __call__(self, history: Sequence[Message]) -> list[Message]:
        """Replace each older tool result by a one-line marker naming its omitted lines.

        A turn is one assistant message that made tool calls; its results belong to it. The
        window counts back from the end of the history, so the newest observations are intact.
        """
        turns = [i for i, m in enumerate(history) if m.get("role") == "assistant"]
        turns = [i for i in turns if history[i].get("tool_calls")]
        if len(turns) <= self.window:
            return list(history)
        boundary = turns[-self.window]
        out: list[Message] = []
        for i, m in enumerate(history):
            if i < boundary and m.get("role") == "tool":
                lines = str(m.get("content") or "").count("\n") + 1
                m = _with_content(m, f"Old environment output: ({lines} lines omitted)")
            out.append(m)
        return out


def make_policy(name: str, *, limit: int, count: Counter) -> Policy:
    """A fresh policy for one session; the clearing policies trigger at half of ``limit``."""
    if name == "raw":
        return Raw()
    if name == "clearing":
        return ToolResultClearing(count=count, trigger=limit // 2)
    if name == "clearing-5k":
        return ToolResultClearing(count=count, trigger=limit // 2, clear_at_least=5000)
    if name == "masking":
        return ObservationMasking()
    raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
