"""A window's stored messages redacted again once its agent's patterns change.

A message is redacted when it is ingested, with the patterns in force then, and the client
resends it on every later request; matched by its hash, it is not ingested again. A pattern
a reload (or a restart) adds would so never reach a tool result or user message stored
before it, which would go to the provider as stored until a compaction folds it. So each
replica remembers, per session, the patterns its window was last scanned under and where they
matched; a step whose patterns differ redacts the window's messages again (not the model's
own replies, which redaction never covers) before the stages run. So the scan costs one pass
per session per change of patterns (and per replica start; not on a new session's first
request, which ingested its whole window just now); a message that matched is redacted in
the prompt again on each step (the stored row keeps its text: the session API shows what was
stored), and it alone, while it stays in the window: a system prompt stored before the
pattern stays there for good.
What is remembered is tied to the session's row (its ``created_at``): a session deleted and
made again under its id, a branch into it copying rows stored under older patterns, is
another session, scanned afresh.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence

from proxy.cascade.redaction_calls import redact_written
from proxy.cascade.types import Message
from proxy.session_id import SessionKey

__all__ = ["WindowRescan"]

MAX_SESSIONS = 100_000
"""Sessions a replica remembers as scanned; the least recently used is scanned again."""


_Scan = tuple[object, tuple[re.Pattern[str], ...], frozenset[int]]
"""A session's row (``born``), the patterns its window was scanned under, and the positions
where they matched."""


class WindowRescan:
    """Per-replica memory of the patterns each session's window was scanned under, and the
    positions where that scan matched."""

    def __init__(self, *, max_sessions: int = MAX_SESSIONS) -> None:
        self._scanned: OrderedDict[SessionKey, _Scan] = OrderedDict()
        self._max = max_sessions

    def window(
        self,
        key: SessionKey,
        window: Sequence[Message],
        patterns: tuple[re.Pattern[str], ...],
        *,
        positions: Sequence[int] | None = None,
        fresh: bool = False,
        born: object = None,
    ) -> tuple[Message, ...]:
        """``window`` with every message but the model's redacted with ``patterns`` when
        this session was not scanned under them; else with those redacted that the scan
        matched (by ``positions``, the messages' places in the history: its index when
        omitted), the others being as found clean or ingested since under ``patterns``.
        ``fresh``: this request ingested every message of the window under ``patterns``
        (a new session's first request), so it is clean without a second pass. ``born``:
        the session row's ``created_at``, which a session made again under its id changes."""
        window = tuple(window)
        places = tuple(range(len(window)) if positions is None else positions)
        if len(places) != len(window):  # no place to remember a match by: a pass each step
            self._scanned.pop(key, None)
            return tuple(_redacted(m, patterns) for m in window) if patterns else window
        known = self._scanned.get(key)
        if patterns and known is not None and known[:2] == (born, patterns):
            self._scanned.move_to_end(key)
            if not known[2]:
                return window
            return tuple(
                _redacted(m, patterns) if pos in known[2] else m
                for m, pos in zip(window, places, strict=True)
            )
        # Other patterns now: what this step stores is redacted with them only, so the window
        # is scanned under none until a pass scans it (redaction off: never).
        self._scanned.pop(key, None)
        if not patterns:
            return window
        out = window if fresh else tuple(_redacted(m, patterns) for m in window)
        matched = frozenset(
            pos for pos, a, b in zip(places, out, window, strict=True) if a is not b
        )
        self._scanned[key] = (born, patterns, matched)
        while len(self._scanned) > self._max:
            self._scanned.popitem(last=False)
        return out


def _redacted(message: Message, patterns: tuple[re.Pattern[str], ...]) -> Message:
    """``message`` redacted with ``patterns`` as ingestion redacts it (``redact_written``: its
    refusal and call arguments too), the model's own as it came."""
    return message if message.get("role") == "assistant" else redact_written(message, patterns)[0]
