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
from collections.abc import Callable
from typing import Any

from proxy.cascade.tokens import make_counter, message_cost
from proxy.cascade.types import Message, TokenCounter

__all__ = ["LOAD_WAIT_SECONDS", "build_counter", "build_counters", "load_encoding"]

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


def build_counter(encoding: str | None = "o200k_base") -> TokenCounter:
    return make_counter(load_encoding(encoding) if encoding else None)


def build_counters(
    encoding: str | None = "o200k_base",
) -> tuple[TokenCounter, Callable[[Message], int]]:
    """A prompt counter and the matching per-message cost, from one encoding load."""
    text_tokens = load_encoding(encoding) if encoding else None
    return make_counter(text_tokens), message_cost(text_tokens)
