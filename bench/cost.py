"""Token counting and the replay metrics, priced the way providers price prompts.

Serialization (what "tokens" and "shared prefix" mean here):

- Each message is rendered to one canonical text by :func:`message_text`: the role (plus
  ``:name`` when set), a newline, the content (text parts joined; an image part becomes
  ``[image]``), then ``reasoning_content`` if present, then one ``\\n<name> <arguments>`` line per
  tool call. Ids (``tool_call_id``, tool call ids) are not rendered: they are structure, not
  text, and are checked by :func:`broken_pairings` instead.
- Each message is encoded on its own with ``o200k_base`` (PyPI ``bpe-openai``, offline, the same
  ids as tiktoken); without it, text is split into 4-character pseudo tokens (chars/4).
- A prompt's token sequence is the concatenation of its messages' sequences. So the shared
  prefix of two prompts is: the tokens of their leading identical messages, plus the common
  token prefix of the first pair of messages that differ. This is a provider's prompt cache at
  token granularity (a cache hit needs an exact prefix).

Cache-weighted cost of a request = ``0.1 * shared + 1.0 * (tokens - shared)``, where ``shared`` is
its shared prefix with the previous request of the same session and the same model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CACHE_READ_PRICE",
    "Tokenizer",
    "get_tokenizer",
    "message_text",
    "broken_pairings",
    "is_prefix",
    "RequestLog",
    "Metrics",
    "measure",
]

Message = Mapping[str, Any]

CACHE_READ_PRICE = 0.1
"""Price of a cached prompt token relative to an uncached one (OpenAI, Anthropic: ~0.1)."""

_MAX_CHUNK = 100_000  # bpe-openai refuses inputs of 1M chars; stay far below


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                if part.get("type") == "text" or "text" in part:
                    parts.append(str(part.get("text") or ""))
                else:
                    parts.append("[image]" if "image" in str(part.get("type")) else "[part]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, sort_keys=True, ensure_ascii=False)


def message_text(message: Message) -> str:
    """Render one message to the canonical text that is tokenized (see the module docstring)."""
    role = str(message.get("role") or "")
    if message.get("name"):
        role = f"{role}:{message['name']}"
    out = [role, "\n", _content_text(message.get("content"))]
    reasoning = message.get("reasoning_content")
    if reasoning:
        out += ["\n", str(reasoning)]
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        out += ["\n", str(fn.get("name") or ""), " ", str(fn.get("arguments") or "")]
    return "".join(out)


class Tokenizer:
    """Per-message token sequences with a cache, so replays re-encode each text once."""

    def __init__(self, encode: Callable[[str], Sequence[Any]], name: str) -> None:
        self._encode = encode
        self.name = name
        self._cache: dict[str, tuple[Any, ...]] = {}

    def tokens(self, message: Message) -> tuple[Any, ...]:
        text = message_text(message)
        hit = self._cache.get(text)
        if hit is None:
            hit = self._cache[text] = tuple(self._encode_long(text))
        return hit

    def _encode_long(self, text: str) -> list[Any]:
        if len(text) <= _MAX_CHUNK:
            return list(self._encode(text))
        out: list[Any] = []
        start = 0
        while start < len(text):
            end = min(len(text), start + _MAX_CHUNK)
            if end < len(text):
                cut = text.rfind("\n", start + _MAX_CHUNK // 2, end)
                end = cut + 1 if cut > 0 else end
            out.extend(self._encode(text[start:end]))
            start = end
        return out

    def count_message(self, message: Message) -> int:
        return len(self.tokens(message))

    def count(self, messages: Iterable[Message]) -> int:
        """Prompt tokens of a message list (no chat-template overhead, no tool schemas)."""
        return sum(len(self.tokens(m)) for m in messages)

    __call__ = count

    def shared_prefix(self, previous: Sequence[Message], current: Sequence[Message]) -> int:
        """Tokens of the longest common prefix of the two prompts' token sequences."""
        shared = 0
        for a, b in zip(previous, current, strict=False):
            ta, tb = self.tokens(a), self.tokens(b)
            if ta == tb:
                shared += len(ta)
                continue
            for x, y in zip(ta, tb, strict=False):
                if x != y:
                    break
                shared += 1
            break
        return shared


def _chars4(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def get_tokenizer(encoding: str = "o200k_base") -> Tokenizer:
    """o200k via ``bpe-openai`` (bundled BPE file, no network); chars/4 when it is missing."""
    try:
        import bpe_openai

        enc = bpe_openai.get_encoding(encoding)
    except Exception:  # noqa: BLE001 - any failure means: fall back to the estimate
        return Tokenizer(_chars4, "chars/4")
    return Tokenizer(enc.encode_ordinary, encoding)


def broken_pairings(messages: Sequence[Message]) -> int:
    """Count tool messages without a preceding matching call, and calls left unanswered.

    A tool message is broken when no earlier assistant message in the prompt issued its id. An
    assistant tool call is broken when its result does not appear before the next assistant
    message (or before the end of the prompt): providers reject both shapes.
    """
    issued: set[str] = set()
    pending: set[str] = set()
    broken = 0
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            broken += len(pending)
            pending = set()
            for call in m.get("tool_calls") or ():
                cid = str(call.get("id"))
                issued.add(cid)
                pending.add(cid)
        elif role == "tool":
            cid = str(m.get("tool_call_id"))
            if cid not in issued:
                broken += 1
            pending.discard(cid)
    return broken + len(pending)


def is_prefix(previous: Sequence[Message], current: Sequence[Message]) -> bool:
    """True when every message of ``previous`` reappears unchanged at the head of ``current``."""
    if len(previous) > len(current):
        return False
    return all(_canon(a) == _canon(b) for a, b in zip(previous, current, strict=False))


def _canon(message: Message) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)


@dataclass(frozen=True, slots=True)
class RequestLog:
    """One request as the upstream saw it: its session, model kind, and prompt."""

    session: str
    messages: tuple[Message, ...]
    fast: bool = False


@dataclass(frozen=True, slots=True)
class Metrics:
    requests: int
    fast_requests: int
    billed_main: int
    billed_fast: int
    peak_prompt: int
    over_limit: int
    broken_pairings: int
    prefix_identical: float
    cache_weighted: float
    cache_weighted_fast: float

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def measure(logs: Sequence[RequestLog], *, limit: int, tokenizer: Tokenizer) -> Metrics:
    """Aggregate the metrics over every request, in order, grouped by (session, model kind).

    ``prefix_identical`` is the fraction of consecutive main-model request pairs of a session in
    which the earlier prompt is an exact message-level prefix of the later one (1.0 when no pair
    exists). ``over_limit`` counts main requests whose prompt exceeds ``limit``.
    """
    previous: dict[tuple[str, bool], tuple[Message, ...]] = {}
    billed = {False: 0, True: 0}
    weighted = {False: 0.0, True: 0.0}
    counts = {False: 0, True: 0}
    peak = over = broken = pairs = identical = 0
    for log in logs:
        key = (log.session, log.fast)
        n = tokenizer.count(log.messages)
        prev = previous.get(key)
        shared = tokenizer.shared_prefix(prev, log.messages) if prev is not None else 0
        billed[log.fast] += n
        weighted[log.fast] += CACHE_READ_PRICE * shared + (n - shared)
        counts[log.fast] += 1
        if not log.fast:
            peak = max(peak, n)
            over += n > limit
            broken += broken_pairings(log.messages)
            if prev is not None:
                pairs += 1
                identical += is_prefix(prev, log.messages)
        previous[key] = log.messages
    return Metrics(
        requests=counts[False],
        fast_requests=counts[True],
        billed_main=billed[False],
        billed_fast=billed[True],
        peak_prompt=peak,
        over_limit=over,
        broken_pairings=broken,
        prefix_identical=identical / pairs if pairs else 1.0,
        cache_weighted=round(weighted[False], 1),
        cache_weighted_fast=round(weighted[True], 1),
    )
