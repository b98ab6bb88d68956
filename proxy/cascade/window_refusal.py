"""A provider's refusal of a prompt too long for its window, read from its error answer.

The estimate can count a prompt below what the provider's tokenizer makes of it (a
session's first step, before any usage calibrated it; a model whose tokenizer is not the
estimate's; no tiktoken at all). The provider then refuses the prompt, and the session
learns from that refusal (``tokens.learned_ratio``), which needs to know that an error
answer is one, and, where its message says, the provider's own count of the prompt and its
window. OpenAI (Azure, DeepSeek, Groq, OpenRouter alike) names it by its code
``context_length_exceeded``, llama.cpp by its type ``exceed_context_size_error`` (with
``n_prompt_tokens`` and ``n_ctx`` beside it); vLLM, TGI, Mistral, Gemini, Anthropic's
compatible endpoint, Bedrock and LiteLLM's proxy (its exception's name) by their wording.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["WindowRefusal", "window_refusal"]

_STATUSES = frozenset({400, 413, 422})
"""The statuses a refusal for length comes with (TGI answers 422, some gateways 413)."""

_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})

_WORDING = re.compile(
    r"context[ _](?:length|window|size)|prompt is too long|maximum model length"
    r"|`inputs` tokens \+ `max_new_tokens`|input is too long for requested model"
    r"|ContextWindowExceeded|exceed context limit",
    re.IGNORECASE,
)
"""Not "too large for model" alone: Groq says it of a prompt over its tokens-per-minute
quota (a 413 ``rate_limit_exceeded``), Mistral beside the context length it names."""
_OF_TOKENS = re.compile(
    r"exceeds? (?:the )?(?:maximum|limit)(?=.{0,200}token)"
    r"|token.{0,200}?exceeds? (?:the )?(?:maximum|limit)",
    re.IGNORECASE,
)
"""Gemini's and vLLM's engine's wording, which says a limit is exceeded: one of tokens, not
of a body's bytes (a gateway's 413). The tokens are looked for near the limit, not to the
line's end: a long message of those words over and over is read in linear time."""

_OUTPUT_CAP = re.compile(
    r"max_(?:completion_|new_|output_)?tokens`?(?: \(\d+\))? "
    r"(?:must be less than or equal to|exceeds )",
    re.IGNORECASE,
)
"""A cap on the output asked for (Groq's names the model's ``context_window`` beside it;
others say ``max_tokens exceeds the limit``, a wording of tokens): the prompt is not what
it refuses, and no trimming changes the answer. Anthropic's "input length and
`max_tokens` exceed context limit" is a refusal for length all the same."""

_N = r"(\d[\d,]*)(?![\d,]*\.?\w)"
"""A figure, with thousands commas; not one a unit or decimals follow ("128k", "1.5M",
"128.000"), which it would be read wrong as (128, 1)."""

_TOLD = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        rf"resulted in {_N} tokens",  # OpenAI
        rf"\({_N} in the messages",  # OpenAI's older wording, vLLM's, DeepSeek's
        rf"\({_N} of text input(?:, {_N} of tool input)?",  # OpenRouter
        rf"\({_N} in your prompt",  # Gemini through OpenRouter
        rf"request has {_N} input tokens",  # vLLM
        rf"prompt is too long: {_N} tokens",  # Anthropic
        rf"exceed context limit: {_N} \+",  # Anthropic, the input beside max_tokens
        rf"prompt contains {_N} tokens",  # Mistral
        rf"given: {_N} `inputs` tokens",  # TGI
        rf"prompt \(length {_N}\)",  # vLLM's engine
        rf"input prompt \({_N} tokens\)",
        rf"input token count \({_N}\)",  # Gemini
        rf"requested (?:about )?{_N} tokens",  # the prompt and the output together
    )
)

_WINDOW = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        rf"maximum context length (?:is|of) {_N}",
        rf"{_N} maximum context length",
        rf"tokens > {_N} maximum",
        rf"maximum model length of {_N}",
        rf"exceeds limit of {_N}",
        rf"must be <= {_N}",
        rf"maximum number of tokens allowed \({_N}\)",
        rf"context window of {_N}",
        rf"exceed context limit: [\d,]+ \+ [\d,]+ > {_N}",
    )
)

_MAX_COUNT = 1 << 40
"""A count past this is no count (a provider's message quoting some other figure)."""


@dataclass(frozen=True, slots=True)
class WindowRefusal:
    """A refusal for length: ``told`` is the provider's count of the prompt and ``window``
    its context window, each None when its message does not say."""

    told: int | None = None
    window: int | None = None


def window_refusal(
    status: int, body: bytes | str, sent: Iterable[Any] = ()
) -> WindowRefusal | None:
    """The refusal ``body`` (an error answer of ``status``) is, when it refuses the prompt
    as too long for the model's window; None for any other answer. ``sent`` is the prompt's
    messages: wording that only quotes their text back (a validation error echoing the
    client's input) is no refusal."""
    if status not in _STATUSES:
        return None
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = text[:20000]
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # nested past the decoder's depth: text too
        data = None
    message, codes, fields = _parts(data) if isinstance(data, Mapping) else (text, set(), {})
    if not (codes & _CODES or _worded(message, sent)) or _OUTPUT_CAP.search(message):
        return None
    told = _count(fields.get("n_prompt_tokens")) or _first(_TOLD, message)
    window = _count(fields.get("n_ctx")) or _first(_WINDOW, message)
    return WindowRefusal(told, window)


def _parts(data: Mapping[str, Any]) -> tuple[str, set[str], Mapping[str, Any]]:
    """The message, the codes and types, and the error object's fields of an error body:
    ``{"error": {"message", "code", "type"}}`` (OpenAI's shape), ``{"error": "..."}`` (TGI's),
    or ``{"message"}`` / ``{"detail"}`` at the top."""
    error = data.get("error")
    inner: Mapping[str, Any] = error if isinstance(error, Mapping) else {}
    texts = [inner.get("message"), error, data.get("message"), data.get("detail")]
    message = " ".join(t for t in texts if isinstance(t, str))
    keys = ("code", "type", "error_type")
    codes = {str(v) for src in (inner, data) for k in keys if (v := src.get(k)) is not None}
    return message, codes, inner


_QUOTE_BREAK = re.compile(r"""['"`\\\n]|\.\.\.|\u2026""")
"""What ends a quotation of the client's text in an error message: a quote, an escape, a
line's end, or the ellipsis a long quoted value is cut with."""


_SPACE = re.compile(r"\s")
_MAX_STRETCHES = 8


def _worded(message: str, sent: Iterable[Any]) -> bool:
    """Whether ``message`` says a prompt is too long for the window in its own words: a
    wording match inside a stretch of the message that the client's own text holds (the
    stretch between quotes, escapes and line ends around it) is a quotation, not a refusal;
    a stretch of one word (a code such as ``context_length_exceeded`` in quotes) is none,
    and so is the whole message, quoted by nothing (a provider's fixed sentence, which a
    long session may hold from an earlier failure).
    At most :data:`_MAX_STRETCHES` stretches are looked up, each once: a message quoting the
    client at length costs no more than that, and is no refusal."""
    breaks = list(_QUOTE_BREAK.finditer(message))
    starts, ends = [b.start() for b in breaks], [b.end() for b in breaks]
    texts: list[str] | None = None
    looked: set[str] = set()
    for pattern in (_WORDING, _OF_TOKENS):
        for m in pattern.finditer(message):
            i, j = bisect_right(ends, m.start()), bisect_left(starts, m.end())
            if not i and j >= len(starts):  # the whole message, quoted by nothing: its own
                return True
            stretch = message[ends[i - 1] if i else 0 : starts[j] if j < len(starts) else None]
            stretch = stretch.strip()
            if stretch in looked:
                continue
            if len(looked) >= _MAX_STRETCHES:
                return False
            looked.add(stretch)
            if texts is None:
                texts = list(_strings(sent))
            if not (_SPACE.search(stretch) and any(stretch in t for t in texts)):
                return True
    return False


def _strings(value: Any) -> Iterator[str]:
    """Every string in the sent messages (their text, their parts', tool calls' arguments),
    walked without recursion: a client's field nested deep is no RecursionError here."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _first(patterns: tuple[re.Pattern[str], ...], message: str) -> int | None:
    """The first pattern's figure, its groups added up (OpenRouter's text and tool input)."""
    for pattern in patterns:
        if (m := pattern.search(message)) is not None and (
            n := sum(_count(g) or 0 for g in m.groups() if g is not None)
        ):
            return n
    return None


def _count(value: Any) -> int | None:
    """A positive count from a field or a matched figure (``130,532`` too), else None."""
    if isinstance(value, str):
        value = value.replace(",", "")
        value = int(value) if value.isdigit() else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value < _MAX_COUNT else None
