"""What a compaction reads and plans before it asks the fast model, and what it ends with."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from proxy.cascade.types import CompactionPlan, Message

__all__ = ["CompactionResult", "Span", "as_text", "ms_since"]


@dataclass(frozen=True, slots=True)
class CompactionResult:
    version: int | None
    boundary: int | None
    folded: int
    tokens_before: int
    tokens_after: int
    reason: str = ""
    failed: bool = False  # the fast model could not give a summary (not: nothing to fold)
    backoff: float | None = None  # seconds the session's background compaction now waits
    moved_to: str | None = None  # the session's agent, when not the one the job was built for


@dataclass(frozen=True, slots=True)
class Span:
    """What a compaction read and planned before it asks the fast model: the session's
    latest summary (``latest``, None before the first) and its ``boundary``, the leading
    system messages, the live rows from the boundary on, the plan over those rows (in index
    space: trimmed messages leave gaps in positions), the prompt's size before the fold, the
    compaction's claim (``owner``): what it writes and reports needs it still held, and the
    session's real/estimated ``ratio``, which the fast model's prompt is fitted with."""

    owner: uuid.UUID
    latest: dict[str, Any] | None
    boundary: int
    head: list[Message]
    tail: list[asyncpg.Record]
    plan: CompactionPlan
    before: int
    ratio: float = 1.0

    @property
    def version(self) -> int | None:
        return self.latest["version"] if self.latest else None

    @property
    def from_pos(self) -> int:
        return int(self.tail[self.plan.start]["pos"])

    @property
    def end_pos(self) -> int:
        """The position after the folded span: the summary's new boundary."""
        plan, tail = self.plan, self.tail
        return int(tail[plan.end]["pos"] if plan.end < len(tail) else tail[plan.end - 1]["pos"] + 1)

    def unchanged(
        self, reason: str, *, failed: bool = False, backoff: float | None = None
    ) -> CompactionResult:
        return CompactionResult(
            None, self.boundary, 0, self.before, self.before, reason, failed, backoff
        )


def ms_since(t0: float) -> int:
    """Milliseconds since the ``time.monotonic()`` reading ``t0``."""
    return round((time.monotonic() - t0) * 1000)


def as_text(summary: Mapping[str, Any]) -> Message:
    """A summary row as a message of the span the ledger reads (its text is all it reads)."""
    return {"role": "user", "content": summary["content"]}
