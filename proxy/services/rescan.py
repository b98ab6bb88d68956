"""A window's stored messages redacted again once its agent's patterns change.

A message is redacted when it is ingested, with the patterns in force then, and the client
resends it on every later request; matched by its hash, it is not ingested again. A pattern
a reload (or a restart) adds would so never reach a tool result or user message stored
before it, which would go to the provider as stored until a compaction folds it. So each
replica remembers, per session, the patterns its window was last found clean under; a step
whose patterns differ redacts the window's messages again (not the model's own replies,
which redaction never covers) before the stages run. A window with nothing to redact is
remembered as clean, so the scan costs one pass per session per change of patterns (and per
replica start; not on a new session's first request, which ingested its whole window just
now); a window with a match is redacted in the prompt on each step (the stored
row keeps its text: the session API shows what was stored) until the message leaves it.
What is remembered is tied to the session's row (its ``created_at``): a session deleted and
made again under its id, a branch into it copying rows stored under older patterns, is
another session, scanned afresh.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence

from proxy.cascade.redaction import redact_message
from proxy.cascade.types import Message
from proxy.session_id import SessionKey

__all__ = ["WindowRescan"]

MAX_SESSIONS = 100_000
"""Sessions a replica remembers as clean; the least recently used is scanned again."""


class WindowRescan:
    """Per-replica memory of the patterns each session's window was found clean under."""

    def __init__(self, *, max_sessions: int = MAX_SESSIONS) -> None:
        self._clean: OrderedDict[SessionKey, tuple[object, tuple[re.Pattern[str], ...]]] = (
            OrderedDict()
        )
        self._max = max_sessions

    def window(
        self,
        key: SessionKey,
        window: Sequence[Message],
        patterns: tuple[re.Pattern[str], ...],
        *,
        fresh: bool = False,
        born: object = None,
    ) -> tuple[Message, ...]:
        """``window`` with every message but the model's redacted with ``patterns`` when
        this session was not found clean under them; the same messages otherwise.
        ``fresh``: this request ingested every message of the window under ``patterns``
        (a new session's first request), so it is clean without a second pass. ``born``:
        the session row's ``created_at``, which a session made again under its id changes."""
        window = tuple(window)
        if patterns and self._clean.get(key) == (born, patterns):
            self._clean.move_to_end(key)
            return window
        # Other patterns now: what this step stores is redacted with them only, so the window
        # is clean under none until a pass finds it so (redaction off: never).
        self._clean.pop(key, None)
        if not patterns:
            return window
        out = window
        if not fresh:
            out = tuple(
                m if m.get("role") == "assistant" else redact_message(m, patterns)[0]
                for m in window
            )
        if all(a is b for a, b in zip(out, window, strict=True)):
            self._clean[key] = (born, patterns)
            self._clean.move_to_end(key)
            while len(self._clean) > self._max:
                self._clean.popitem(last=False)
        return out
