"""Build the process's TokenCounter once at start-up.

tiktoken downloads its BPE files on first use, which fails offline. We honour
``TIKTOKEN_CACHE_DIR`` (tiktoken reads it itself; the Docker image bakes the files in), and
when no encoding can be loaded, or none loads within ``LOAD_WAIT_SECONDS``, we fall back to
the chars/token estimate with ONE warning.
The estimate is self-calibrating per session (real/estimated ratio), so the fallback costs
accuracy only on a session's first step.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from proxy.cascade.tokens import make_counter, message_cost
from proxy.cascade.types import Message, TokenCounter

__all__ = [
    "LOAD_WAIT_SECONDS",
    "TextCounts",
    "build_counter",
    "build_counters",
    "counters_for",
    "load_encoding",
]

log = logging.getLogger("cascade.tokens")


LOAD_WAIT_SECONDS = 30.0
"""How long the start waits for an encoding: tiktoken downloads a file missing from its cache
with no timeout, so a network that drops the packets, or an egress proxy that never answers,
would hold the start forever. Past it the start goes on with the estimate (the download may
still finish in the background and fill the cache for the next start)."""


def load_encoding(
    name: str = "o200k_base", wait: float = LOAD_WAIT_SECONDS
) -> Callable[[str], int] | None:
    """A per-text token function from tiktoken, or None when its files cannot be loaded
    within ``wait`` seconds."""
    loaded: list[Any] = []
    failed: list[BaseException] = []

    def load() -> None:
        try:
            import tiktoken  # the shell owns tiktoken; the pure core never imports it

            enc = tiktoken.get_encoding(name)
            enc.encode("warm up")
            loaded.append(enc)
        except Exception as exc:  # offline, missing cache, or tiktoken not installed
            failed.append(exc)

    loader = threading.Thread(target=load, name="tiktoken-load", daemon=True)
    loader.start()
    loader.join(wait)
    if not loaded:
        why = type(failed[0]).__name__ if failed else f"no answer within {wait:g} s"
        hint = "Set TIKTOKEN_CACHE_DIR to a directory holding the encoding to use real counts."
        if failed and (cache := _cache_at_fault(failed[0])):
            why = f"TIKTOKEN_CACHE_DIR {cache} cannot be used: {why}, {failed[0]}"
            hint = "Make TIKTOKEN_CACHE_DIR writable, or put the encoding's file in it."
        log.warning(
            "tiktoken encoding %s unavailable (%s); using the calibrated chars/token estimate. %s",
            name,
            why,
            hint,
        )
        return None
    enc = loaded[0]

    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=()))

    return count


def _cache_at_fault(exc: BaseException) -> str | None:
    """``TIKTOKEN_CACHE_DIR`` when ``exc`` is an OS error on a path in it (a directory the
    process cannot create or write: tiktoken raises the error of the file it was writing,
    which names neither the variable nor, alone, the directory as the cause)."""
    cache = os.environ.get("TIKTOKEN_CACHE_DIR")
    path = getattr(exc, "filename", None) if isinstance(exc, OSError) else None
    if not cache or not isinstance(path, str):
        return None
    where = os.path.abspath(cache)
    return cache if os.path.commonpath([where, os.path.abspath(path)]) == where else None


CACHE_MIN_CHARS = 512
"""Texts at least this long have their counts remembered: below it the BPE costs about what
the lookup does, and the many short new messages would only churn the cache."""
CACHE_MAX_CHARS = 4_000_000
"""Characters of remembered texts a process holds at most; the least recently used go."""


class TextCounts:
    """A per-text token function that remembers the counts of long texts, by the text.

    A request prices its messages through a fresh ``MemoCounter``, by identity, and seeds
    the stored rows' counts; a message the proxy builds anew on every request (the first
    user message the summary is folded into) is a new object each time, so without this it
    is tokenised again on every request, at a cost that grows with the summary. Keyed by
    the text itself (one instance per encoding), so a hit is exact, never a hash's guess;
    bounded by the characters it holds, least recently used out first. Called on the event
    loop only (nothing tokenises in an executor), so it takes no lock.
    """

    __slots__ = ("_fn", "_memo", "_chars", "_min", "_max", "misses")

    def __init__(
        self,
        fn: Callable[[str], int],
        *,
        min_chars: int = CACHE_MIN_CHARS,
        max_chars: int = CACHE_MAX_CHARS,
    ) -> None:
        self._fn = fn
        self._memo: OrderedDict[str, int] = OrderedDict()
        self._chars = 0
        self._min = min_chars
        self._max = max_chars
        self.misses = 0  # long texts tokenised (not found remembered)

    def __call__(self, text: str) -> int:
        if len(text) < self._min:
            return self._fn(text)
        memo = self._memo
        n = memo.get(text)
        if n is not None:
            memo.move_to_end(text)
            return n
        n = self._fn(text)
        self.misses += 1
        if len(text) <= self._max:
            memo[text] = n
            self._chars += len(text)
            while self._chars > self._max:
                old, _ = memo.popitem(last=False)
                self._chars -= len(old)
        return n


def counters_for(
    text_tokens: Callable[[str], int] | None,
) -> tuple[TokenCounter, Callable[[Message], int]]:
    """A prompt counter and the matching per-message cost over one per-text function (the
    estimate when None), sharing one :class:`TextCounts` for a BPE's."""
    if text_tokens is None:
        return make_counter(None), message_cost(None)
    cached = TextCounts(text_tokens)
    return make_counter(cached), message_cost(cached)


def build_counter(encoding: str | None = "o200k_base") -> TokenCounter:
    return counters_for(load_encoding(encoding) if encoding else None)[0]


def build_counters(
    encoding: str | None = "o200k_base",
) -> tuple[TokenCounter, Callable[[Message], int]]:
    """A prompt counter and the matching per-message cost, from one encoding load."""
    return counters_for(load_encoding(encoding) if encoding else None)
