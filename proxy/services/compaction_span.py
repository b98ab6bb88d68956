"""What a compaction reads and plans before it asks the fast model (``read_span``), and what
it ends with."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import asyncpg

from proxy.cascade.pipeline import drop_commands
from proxy.cascade.redaction import redact
from proxy.cascade.redaction_calls import redact_written
from proxy.cascade.summary import MIN_SPAN_RATIO, fold_summary, plan_compaction
from proxy.cascade.types import CompactionPlan, Message, TokenCounter
from proxy.services.compaction_job import CompactionJob
from proxy.services.interrupted import Closer
from proxy.store import messages as msgs, sessions, steps, summaries
from proxy.store.db import Connection

__all__ = [
    "CLAIM_PASSED",
    "NOTHING_TO_FOLD",
    "SPAN_TOO_SMALL",
    "CompactionResult",
    "Span",
    "as_text",
    "ms_since",
    "read_span",
    "unfolded",
]

log = logging.getLogger("cascade.compaction")

_MEASURED = frozenset({"soft", "hard", "overflow"})
"""Triggers of a compaction the pressure started, measured on a window with its summary
(``CompactionJob.summary_version``); a forced one has no measure to be stale."""


NOTHING_TO_FOLD = "nothing to fold"
SPAN_TOO_SMALL = (
    f"the span to fold is under {MIN_SPAN_RATIO:g} times the characters of the messages kept"
    " after it: too small to repay the cache miss a new summary costs"
)


def unfolded(
    messages: Sequence[Message], *, keep_recent: int, observation_prefixes: Sequence[str]
) -> str:
    """Why ``plan_compaction`` folds nothing of ``messages`` (the window after the boundary):
    a span too small to repay a summary is there all the same, and a forced compaction's
    caller reads that apart from a window with none."""
    whole = plan_compaction(
        messages,
        offset=0,
        boundary=0,
        keep_recent=keep_recent,
        previous=None,
        system_count=0,
        min_span_ratio=0,
        observation_prefixes=observation_prefixes,
    )
    return NOTHING_TO_FOLD if whole is None else SPAN_TOO_SMALL


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
    superseded: bool = False  # another compaction stored a summary since the pressure's measure
    busy: bool = False  # failed waiting for the proxy's budget of whole answers (server_busy)


CLAIM_PASSED = "the compaction's claim passed to another one before it started"
"""The reason of a compaction that lost its claim before it started: it folds nothing."""


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
        self, reason: str, *, failed: bool = False, backoff: float | None = None, busy: bool = False
    ) -> CompactionResult:
        return CompactionResult(
            None, self.boundary, 0, self.before, self.before, reason, failed, backoff, busy=busy
        )


def ms_since(t0: float) -> int:
    """Milliseconds since the ``time.monotonic()`` reading ``t0``."""
    return round((time.monotonic() - t0) * 1000)


def as_text(summary: Mapping[str, Any]) -> Message:
    """A summary row as a message of the span the ledger reads (its text is all it reads)."""
    return {"role": "user", "content": summary["content"]}


async def read_span(
    conn: Connection, job: CompactionJob, owner: uuid.UUID, *, count: TokenCounter, closer: Closer
) -> Span | CompactionResult | None:
    """The session's latest summary and the window after it, planned (the span and the
    summary redacted with the agent's patterns: the fast model reads them); None when the
    session is gone, an unchanged result when ``owner`` no longer holds its claim (its lease
    expired and another compaction claimed it, or the session was made again since), when
    there is nothing to fold or, naming the agent in ``moved_to``, when the session now
    runs another agent than the one the job was built for (nothing read: its history is
    not the old agent's fast model's to see). A job the pressure started whose session has
    another latest summary than the one its pressure was measured on
    (``job.summary_version``: another compaction, whose claim it waited out, stored one)
    folds nothing either, ``superseded``: that summary may have relieved it, and the
    request measures again on it (``pressure.PressureRelief``). A session now run by an
    agent outside ``job.agents`` raises ``AgentRefused``, nothing read or reported: the
    key's check as it arrived saw the session before the compaction waited for its
    claim."""
    key = {"tenant": job.tenant, "session_id": job.session_id}
    row = await sessions.fetchrow_session(conn, **key)
    if row is None:
        return None
    if row["compaction_owner"] != owner:  # a session there, not this compaction's to fold
        log.warning("compaction of %s: its claim passed; nothing folded", job.session_id)
        return CompactionResult(None, None, 0, 0, 0, CLAIM_PASSED)
    if job.agents is not None and row["agent"] not in (*job.agents, None):
        raise steps.AgentRefused(row["agent"])
    if row["agent"] != job.agent:  # built with another agent's fast model and settings
        moved = f"the session moved to agent {row['agent']!r}; nothing was folded"
        return CompactionResult(None, None, 0, 0, 0, moved, moved_to=row["agent"])
    await closer.close_session(conn, job.tenant, job.session_id)
    latest = await summaries.fetchrow_latest(conn, **key)
    boundary = latest["boundary"] if latest else 0
    if job.trigger in _MEASURED and (latest["version"] if latest else None) != job.summary_version:
        relieved = "another compaction stored a summary since the pressure was measured"
        # DEBUG: the race is benign and expected (the pressure measures again on that
        # summary), yet it explains a step that waited for a claim and then folded nothing
        log.debug(
            "%s compaction of session %s folds nothing: %s (version %s, measured on %s)",
            job.trigger,
            job.session_id,
            relieved,
            latest["version"] if latest else None,
            job.summary_version,
        )
        return CompactionResult(None, boundary, 0, 0, 0, relieved, superseded=True)
    previous = latest["content"] if latest else None
    sc = row["system_count"]
    start = max(boundary, sc)
    rows = await msgs.fetch_window(conn, **key, system_count=sc, from_pos=start)
    head = [r["message"] for r in rows if r["pos"] < sc]
    tail = [r for r in rows if r["pos"] >= start]
    plan = plan_compaction(
        [r["message"] for r in tail],
        offset=0,
        boundary=0,
        keep_recent=job.cfg.keep_recent,
        previous=previous,
        system_count=0,
        observation_prefixes=job.observation_prefixes,
    )
    before = count(
        fold_summary(
            [*head, *(r["message"] for r in tail)], summary=previous, system_count=len(head)
        )
    )
    if plan is None:
        why = unfolded(
            [r["message"] for r in tail],
            keep_recent=job.cfg.keep_recent,
            observation_prefixes=job.observation_prefixes,
        )
        return CompactionResult(None, boundary, 0, before, before, why)
    # /compact exchanges were answered by the proxy: the fast model never sees them.
    plan = replace(plan, span=drop_commands(plan.span))
    if job.redaction:  # what the model wrote was stored as it came: redacted here
        plan = replace(
            plan,
            span=tuple(redact_written(m, job.redaction)[0] for m in plan.span),
            previous=None if previous is None else redact(previous, job.redaction)[0],
        )
        if latest is not None:
            latest = {**latest, "content": plan.previous}
    return Span(owner, latest, boundary, head, tail, plan, before, float(row["calibration"]))
