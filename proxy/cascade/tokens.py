"""Token estimates, the counter the stages use, and the real/estimated calibration math.

The core never imports a tokenizer: the shell builds a BPE encoder once at startup and passes
a per-text function to :func:`make_counter`. Without one, text is counted by
``estimate.text_tokens`` (characters / 4 for prose and code, more for text a BPE splits finer).
Both follow OpenAI's cookbook shape: every message costs a few tokens of framing on top of its
text, and the reply is primed with a few more.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proxy.cascade.estimate import text_tokens as estimate_text
from proxy.cascade.images import MAX_IMAGE_TOKENS, image_tokens
from proxy.cascade.rounds import call_functions
from proxy.cascade.text import content_text
from proxy.cascade.types import Message, TokenCounter

__all__ = [
    "TOKENS_PER_MESSAGE",
    "REPLY_PRIMING_TOKENS",
    "IMAGE_TOKENS",
    "MIN_RATIO",
    "MAX_RATIO",
    "message_text",
    "estimate_tokens",
    "make_counter",
    "message_cost",
    "MemoCounter",
    "LEARN_MARGIN",
    "calibrate",
    "learned_ratio",
    "effective_input_tokens",
]

TOKENS_PER_MESSAGE = 4
"""Framing every message costs (role, separators), as in OpenAI's cookbook formula."""
REPLY_PRIMING_TOKENS = 3
"""Every reply is primed with ``<|start|>assistant<|message|>``; counted once per prompt."""
IMAGE_TOKENS = MAX_IMAGE_TOKENS
"""What an image part of unknown size costs: the most any image can (``images.py``)."""
MIN_RATIO = 0.5
MAX_RATIO = 2.0
LEARN_MARGIN = 1.05
"""A prompt the provider refused as too long is counted, after, at least this far over the
budget the guard fits prompts to (``learned_ratio``)."""

_IMAGE_PART_TYPES = frozenset({"image_url", "input_image", "image"})


def _call_text(fn: Mapping[str, Any]) -> str:
    name = fn.get("name") or ""
    args = fn.get("arguments") or ""
    return f"{name}\n{args if isinstance(args, str) else str(args)}"


def message_text(msg: Message) -> str:
    """All text a message carries: content (string or text parts), tool calls, name.

    Tool calls contribute their function name and raw argument string; the legacy
    ``function_call`` field is treated the same way. Image parts contribute no text (they are
    priced by ``images.image_tokens``).
    """
    pieces: list[str] = []
    name = msg.get("name")
    if isinstance(name, str) and name:
        pieces.append(name)
    content = content_text(msg.get("content"))
    if content:
        pieces.append(content)
    refusal = msg.get("refusal")
    if isinstance(refusal, str) and refusal:
        pieces.append(refusal)
    pieces.extend(_call_text(fn) for fn in call_functions(msg))
    return "\n".join(pieces)


def _images(msg: Message) -> int:
    """The tokens of a message's image parts: OpenAI's tile rule where the size is known."""
    content = msg.get("content")
    if isinstance(content, str) or not isinstance(content, Sequence):
        return 0
    return sum(
        image_tokens(p)
        for p in content
        if isinstance(p, Mapping) and p.get("type") in _IMAGE_PART_TYPES
    )


def _count(messages: Sequence[Message], text_tokens: Callable[[str], int]) -> int:
    if not messages:
        return 0
    total = REPLY_PRIMING_TOKENS
    for msg in messages:
        total += TOKENS_PER_MESSAGE + text_tokens(message_text(msg))
        total += _images(msg)
    return total


def estimate_tokens(messages: Sequence[Message], chars_per_token: float | None = None) -> int:
    """Estimate prompt tokens as ``estimate.text_tokens`` of each message's text (or
    ceil(chars / chars_per_token) when given) plus framing.

    Each message adds :data:`TOKENS_PER_MESSAGE`, each image part its tiles' tokens, and a
    non-empty prompt adds :data:`REPLY_PRIMING_TOKENS` once. An empty list costs 0. The
    estimate is monotone: adding text or messages never lowers it.
    """
    if chars_per_token is None:
        return _count(messages, estimate_text)
    if chars_per_token <= 0:
        raise ValueError("chars_per_token must be positive")
    per = chars_per_token
    return _count(messages, lambda s: math.ceil(len(s) / per))


def make_counter(text_tokens: Callable[[str], int] | None = None) -> TokenCounter:
    """Build a :class:`TokenCounter` from a per-text token function (the estimate when ``None``).

    The shell passes ``lambda s: len(enc.encode(s))`` for a BPE encoder it built at startup;
    the framing rules are the same as :func:`estimate_tokens`, so switching between the two
    changes only the text part of the count.
    """
    if text_tokens is None:

        def fallback(messages: Sequence[Message], /) -> int:
            return estimate_tokens(messages)

        return fallback
    fn = text_tokens

    def counter(messages: Sequence[Message], /) -> int:
        return _count(messages, fn)

    return counter


def message_cost(text_tokens: Callable[[str], int] | None = None) -> Callable[[Message], int]:
    """What one message adds to a prompt's count (framing, text, images; no reply priming).

    ``make_counter(f)(msgs) == REPLY_PRIMING_TOKENS + sum(message_cost(f)(m) for m in msgs)``
    for any non-empty ``msgs``: counts are additive, which is what lets them be memoised.
    """
    fn = text_tokens or estimate_text

    def cost(msg: Message) -> int:
        return TOKENS_PER_MESSAGE + fn(message_text(msg)) + _images(msg)

    return cost


class MemoCounter:
    """A TokenCounter that prices each message once, remembered by identity.

    A request counts the same window many times (occupancy, thresholds, eviction, the
    guard's search, the final size); with a real BPE encoder that dominated its CPU. Costs
    known from the store (each message's ``tokens`` column) are seeded, so resent history
    is never re-tokenised. Holds references to the messages it priced, so ids stay unique.
    """

    __slots__ = ("_cost", "_memo")

    def __init__(self, cost: Callable[[Message], int]) -> None:
        self._cost = cost
        self._memo: dict[int, tuple[Message, int]] = {}

    @property
    def cost(self) -> Callable[[Message], int]:
        """The per-message cost this counter memoises."""
        return self._cost

    def seed(self, msg: Message, tokens: int) -> None:
        self._memo[id(msg)] = (msg, tokens)

    def one(self, msg: Message) -> int:
        hit = self._memo.get(id(msg))
        if hit is None:
            hit = (msg, self._cost(msg))
            self._memo[id(msg)] = hit
        return hit[1]

    def __call__(self, messages: Sequence[Message], /) -> int:
        if not messages:
            return 0
        memo, total = self._memo, REPLY_PRIMING_TOKENS
        for m in messages:  # inlined lookup: this loop runs several times per request
            hit = memo.get(id(m))
            total += hit[1] if hit is not None else self.one(m)
        return total


def calibrate(ratio: float, *, real: int, estimated: int, weight: float = 0.5) -> float:
    """Fold one observation of real/estimated into the correction ratio.

    An exponential moving average (``weight`` is the share of the new sample) clamped to
    [:data:`MIN_RATIO`, :data:`MAX_RATIO`] so that one odd response (a cached prompt, a
    provider that reports 0) cannot swing the estimate wildly. When either count is <= 0 the
    observation carries no information and ``ratio`` is returned unchanged.
    """
    if real <= 0 or estimated <= 0:
        return ratio
    weight = min(1.0, max(0.0, weight))
    base = ratio if ratio > 0 else 1.0
    updated = (1.0 - weight) * base + weight * (real / estimated)
    return min(MAX_RATIO, max(MIN_RATIO, updated))


def learned_ratio(ratio: float, *, estimate: int, budget: int, told: int | None = None) -> float:
    """The correction ratio after the provider refused a prompt estimated at ``estimate`` as
    too long for its window: raised so that this prompt counts at least at the provider's own
    count of it (``told``, when its message says) and at least :data:`LEARN_MARGIN` over
    ``budget`` (the room the guard fits a prompt to), so the guard trims the same history
    when the client sends it again. A ``told`` within ``budget`` says the prompt was not what
    was too long (the output asked for, ``max_tokens``, or a window below the configured
    one, which no trimming fixes): the ratio learns that count and no margin. Never lowered,
    and never raised past :data:`MAX_RATIO`, the bound ``calibrate`` keeps too: a count that
    is wrong cannot make the guard count a prompt more than twice its estimate, and every
    later step's real usage pulls the ratio back (``calibrate``).
    """
    if estimate <= 0:
        return ratio
    if told is not None and told <= budget:
        target = float(told)
    else:
        target = max(told or 0, budget * LEARN_MARGIN)
    return max(ratio, min(MAX_RATIO, target / estimate))


def effective_input_tokens(
    estimate: int, *, ratio: float, last_real: int | None, last_estimate: int | None = None
) -> int:
    """Occupancy: the provider's real count of the previous prompt, moved by the change since.

    ``last_real`` is the ``usage.prompt_tokens`` the provider reported for the previous step
    and ``last_estimate`` our estimate of that same prompt; the estimated difference to the
    prompt about to be sent (new messages, evictions, a new summary) is scaled by ``ratio``
    and added. Without a usable real count it is the calibrated estimate. Soft triggers
    (eviction, background compaction) read this; the hard overflow guard counts the prompt
    about to be sent instead.
    """
    if last_real is not None and last_real > 0:
        if last_estimate is None:
            return last_real
        return max(0, last_real + round((estimate - last_estimate) * ratio))
    return max(0, round(estimate * ratio))
