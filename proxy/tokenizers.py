"""Build the process's TokenCounter once at start-up.

tiktoken downloads its BPE files on first use, which fails offline. We honour
``TIKTOKEN_CACHE_DIR`` (tiktoken reads it itself; the Docker image bakes the files in), and
when no encoding can be loaded we fall back to the chars/token estimate with ONE warning.
The estimate is self-calibrating per session (real/estimated ratio), so the fallback costs
accuracy only on a session's first step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from proxy.cascade.tokens import make_counter, message_cost
from proxy.cascade.types import Message, TokenCounter

__all__ = ["build_counter", "build_counters", "load_encoding"]

log = logging.getLogger("cascade.tokens")


def load_encoding(name: str = "o200k_base") -> Callable[[str], int] | None:
    """A per-text token function from tiktoken, or None when its files cannot be loaded."""
    try:
        import tiktoken  # the shell owns tiktoken; the pure core never imports it

        enc = tiktoken.get_encoding(name)
        enc.encode("warm up")
    except Exception as exc:  # offline, missing cache, or tiktoken not installed
        log.warning(
            "tiktoken encoding %s unavailable (%s); using the calibrated chars/token estimate."
            " Set TIKTOKEN_CACHE_DIR to a directory holding the encoding to use real counts.",
            name,
            type(exc).__name__,
        )
        return None

    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=()))

    return count


def build_counter(encoding: str | None = "o200k_base") -> TokenCounter:
    return make_counter(load_encoding(encoding) if encoding else None)


def build_counters(
    encoding: str | None = "o200k_base",
) -> tuple[TokenCounter, Callable[[Message], int]]:
    """A prompt counter and the matching per-message cost, from one encoding load."""
    text_tokens = load_encoding(encoding) if encoding else None
    return make_counter(text_tokens), message_cost(text_tokens)
