"""How a compaction that stored nothing is reported: ``context.compaction.failed``, its
reason, and the backoff a failed summary call leaves on the session."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.cascade.pressure import compaction_backoff
from proxy.cascade.types import COMPACTION_FAILED
from proxy.services.compaction_job import CompactionJob, SummaryCallError
from proxy.services.compaction_span import Span, ms_since
from proxy.store import events, leases as claims, sessions
from proxy.store.db import Connection

__all__ = ["Publish", "discarded", "report_failed"]

log = logging.getLogger("cascade.compaction")

Publish = Callable[[Any, CompactionJob, str, dict[str, Any]], Awaitable[None]]
"""``compaction_events.publish`` bound to the summarizer's bus: reports one event of the
compaction's session."""


async def discarded(conn: Connection, job: CompactionJob) -> tuple[str, str]:
    """Why a summary's insert wrote nothing, as a failure's reason and its text: the session
    moved to another agent (``agent_changed``: the summary was made by the old agent's fast
    model, under its settings) or the history changed under the span (``history_changed``).
    Read only after an insert that wrote nothing; a lost claim is reported by neither."""
    row = await sessions.fetchrow_session(conn, tenant=job.tenant, session_id=job.session_id)
    if row is not None and row["agent"] != job.agent:
        return "agent_changed", (
            f"the session moved to agent {row['agent']!r} while summarising for agent "
            f"{job.agent!r}; the summary was discarded"
        )
    return "history_changed", "the history changed while summarising; the summary was discarded"


async def report_failed(
    conn: Connection,
    publish: Publish,
    job: CompactionJob,
    span: Span,
    t0: float,
    reason: str,
    error: str,
    attempts: int,
    exc: SummaryCallError | None = None,
) -> float | None:
    """Report a compaction that left the previous state as it was, unless it lost its
    claim: its session was deleted (and perhaps made again, under the same id, by a
    request: not the session it started in), or the compaction that took the lapsed claim
    closed its start as interrupted already. Returns the session's backoff, in seconds,
    after a ``summary_failed`` one (None after another reason, or a lost claim), which is
    one WARNING with its cause and that backoff: its attempts are INFO lines."""
    key = {"tenant": job.tenant, "session_id": job.session_id}
    if not await claims.holds_compaction(conn, **key, owner=span.owner):
        log.info("compaction of %s lost its claim; %s dropped", job.session_id, reason)
        return None
    data = {
        "reason": reason,
        "error": error,
        "attempts": attempts,
        "duration_ms": ms_since(t0),
        "tokens_before": span.before,
        "tokens_after": span.before,
        "summary_version": span.version,
        "from_pos": span.from_pos,  # the span it did not fold, as its start named it
        "to_pos": span.end_pos,
    }
    backoff = None
    if reason == "summary_failed":
        run = await events.count_failed_run(conn, tenant=job.tenant, session_id=job.session_id)
        backoff = compaction_backoff(run + 1, exc.retry_after if exc else None)
        data["retry_in_seconds"] = backoff
        if job.trigger != "api":  # the API's answer is a 502, whose line says it
            log.warning(
                "compaction of %s failed after %d attempt(s), the next in %g s: %s",
                job.session_id,
                attempts,
                backoff,
                error,
            )
    await publish(conn, job, COMPACTION_FAILED, data)
    return backoff
