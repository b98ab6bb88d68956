"""The work of one compaction that holds its session's claim (``Folding``, a part of
``compaction.DurableSummarizer``): read and plan (``compaction_span.read_span``), report
the start, ask the fast model with no connection held (``compaction_job.summarise``), then
write the summary and report it, or report the failure (``compaction_failed.report_failed``),
and promote a stored span's facts to memory when the agent asks for it.

``Folding`` also knows, while a compaction runs, the end its events still owe
(``ending``): a stop that cuts it counts that end once (``interrupted``, or ``completed``
for one cut after its summary's insert), as the stop's close writes it outside any request.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import asyncpg

from proxy.answer_budget import RoomWait
from proxy.bus import EventBus
from proxy.cascade.ledger import apply_ledger
from proxy.cascade.redaction import redact
from proxy.cascade.summary import fold_summary
from proxy.cascade.types import COMPACTION_COMPLETED, COMPACTION_FAILED, TokenCounter
from proxy.services.compaction_events import publish, report_started
from proxy.services.compaction_failed import discarded, report_failed
from proxy.services.compaction_job import (
    Briefing,
    CompactionJob,
    SummaryCallError,
    SummaryDeferred,
    summarise,
)
from proxy.services.compaction_span import (
    CLAIM_PASSED,
    CompactionResult,
    Span,
    as_text,
    ms_since,
    read_span,
)
from proxy.services.interrupted import Closer
from proxy.services.promotion import promote
from proxy.services.promotion_owed import Promotions
from proxy.store import summaries
from proxy.store.db import Lent, unavailable_when_lost
from proxy.upstream import Upstream

__all__ = ["Folding", "FORCED", "INSERTING"]

log = logging.getLogger("cascade.compaction")
Key = tuple[str, str]

INSERTING = "inserting"
"""The ``ending`` of a compaction inside its summary's insert: a stop that cuts it there does
not know whether the insert stored it, which its close finds out (and counts)."""

FORCED = frozenset({"api", "command"})
"""Triggers of a compaction someone asked for (the endpoint, the CLI, ``/compact``): it is
stored even when it frees no room, since the summary itself (its plan, its ledger) was asked
for; one the pressure started is not worth a larger prompt."""


class Folding:
    """The fold and the write of ``DurableSummarizer`` (which sets these attributes), and
    the ends its running compactions owe (``ending``: by session, the event a cut one's
    close writes)."""

    pool: asyncpg.Pool
    acquire_timeout: float
    upstream: Upstream
    bus: EventBus
    count: TokenCounter
    ending: dict[Key, str]
    rooms: dict[Key, RoomWait]  # a background compaction's waits for room, a request may join
    _tasks: dict[Key, asyncio.Task[CompactionResult | None]]
    _promotions: Promotions
    _closer: Closer

    def _began(self, job: CompactionJob, end: str = COMPACTION_FAILED) -> None:
        """``job`` reported its start (``end``: failed, as its close writes it), began its
        summary's insert (``INSERTING``: its close knows) or stored it (completed): a stop
        that cuts it now counts that end."""
        self.ending[(job.tenant, job.session_id)] = end

    async def _publish(
        self, conn: Any, job: CompactionJob, name: str, data: dict[str, Any]
    ) -> None:
        """Report an event of the compaction's (``compaction_events.publish``); its end's
        counts, so a stop that cuts it after counts it no more."""
        await publish(self.bus, conn, job, name, data)
        if name in (COMPACTION_COMPLETED, COMPACTION_FAILED):
            self.ending.pop((job.tenant, job.session_id), None)

    async def _compact(self, job: CompactionJob, owner: uuid.UUID) -> CompactionResult | None:
        """Read and plan, call the fast model, write: a connection borrowed for the first
        and the last part only."""
        with unavailable_when_lost():
            async with Lent(self.pool, self.acquire_timeout) as lent:
                return await self._fold(lent, job, owner)

    async def _fold(
        self, lent: Lent, job: CompactionJob, owner: uuid.UUID
    ) -> CompactionResult | None:
        """Read and plan (``read_span``), report the start, ask the fast model with no connection
        held, then write and report the summary (``_store``) or the failure (``report_failed``)."""
        conn = await lent.take()
        span = await read_span(conn, job, owner, count=self.count, closer=self._closer)
        if not isinstance(span, Span):
            return span  # no session, or nothing to fold
        t0 = time.monotonic()
        started = {
            "from_pos": span.from_pos,
            "to_pos": span.end_pos,
            "tokens_before": span.before,
            "summary_version": span.version,
        }
        if not await report_started(conn, job, owner, started):
            log.warning("compaction of %s: its claim passed; nothing folded", job.session_id)
            return span.unchanged(CLAIM_PASSED)  # None would say the session is gone
        self._began(job)
        await lent.give_back()  # none held while the fast model answers
        try:
            plan, ratio = span.plan, span.ratio
            room = None if job.waited_on else self.rooms.get((job.tenant, job.session_id))
            brief = await summarise(
                self.upstream, job, plan, count=self.count, ratio=ratio, room=room
            )
        except SummaryCallError as exc:
            conn = await lent.take()
            error, calls = str(exc), exc.attempts
            busy = isinstance(exc, SummaryDeferred)
            why = "server_busy" if busy else "summary_failed"
            wait = await report_failed(conn, self._publish, job, span, t0, why, error, calls, exc)
            return span.unchanged(str(exc), failed=True, backoff=wait, busy=busy)
        return await self._store(lent, job, span, brief, t0)

    async def _store(
        self, lent: Lent, job: CompactionJob, span: Span, brief: Briefing, t0: float
    ) -> CompactionResult:
        """Write the summary unless the history changed meanwhile or, for a compaction the
        pressure started, the prompt with it would be no smaller than before (a failure:
        folding it would only grow every later prompt), report it, and promote the span's
        facts to memory when the agent asks for it."""
        conn = await lent.take()
        # The previous summary is folded too: its identifiers (its own ledger's among them)
        # are the oldest the model was given, so one it drops comes back, within the cap.
        given = [*([] if span.latest is None else [as_text(span.latest)]), *span.plan.span]
        ledger = apply_ledger(brief.content, given, cap=job.cfg.ledger_cap)
        content = redact(ledger.summary, job.redaction)[0]  # whatever the fast model wrote
        head = span.head
        kept = [r["message"] for r in span.tail[span.plan.end :]]
        after = self.count(fold_summary([*head, *kept], summary=content, system_count=len(head)))
        if after >= span.before and job.trigger not in FORCED:  # every later prompt larger
            reason = (
                f"the briefing leaves the prompt no smaller ({after} tokens, {span.before} before)"
            )
            wait = await report_failed(
                conn, self._publish, job, span, t0, "summary_failed", reason, brief.calls
            )
            return span.unchanged(reason, failed=True, backoff=wait)
        self._began(job, INSERTING)
        version = await summaries.insert_summary(
            conn,
            tenant=job.tenant,
            session_id=job.session_id,
            boundary=span.end_pos,
            boundary_hash=span.tail[span.plan.end - 1]["hash"],
            content=content,
            tokens=self.count([{"role": "user", "content": content}]),
            model=job.fast_model,
            owner=span.owner,
            agent=job.agent,
            owe_from=None if job.promotion == "off" else span.from_pos,
        )
        if version is None:  # the history changed, or the session's agent
            why, reason = await discarded(conn, job)
            await report_failed(conn, self._publish, job, span, t0, why, reason, brief.calls)
            return span.unchanged(reason)
        self._began(job, COMPACTION_COMPLETED)  # cut now, its close says completed
        folded = span.plan.end - span.plan.start
        completed = {
            "summary_version": version,
            "from_pos": span.from_pos,
            "to_pos": span.end_pos,
            "folded_messages": folded,
            "tokens_before": span.before,
            "tokens_after": after,
            "duration_ms": ms_since(t0),
            "identifiers_kept": ledger.kept,
            "identifiers_added": ledger.added,
            "identifiers_dropped": ledger.dropped,
        }
        key, task = (job.tenant, job.session_id), asyncio.current_task()
        owing = task if job.promotion != "off" and task is self._tasks.get(key) else None
        with self._promotions.owing(owing, key):  # a stop waits for it, as for a promotion
            await self._publish(conn, job, COMPACTION_COMPLETED, completed)
            owed, facts = (span.from_pos, span.end_pos), span.plan.span
            if job.promotion != "off" and job.trigger in FORCED:
                await promote(
                    self.upstream,
                    self.bus,
                    lent,
                    job,
                    facts,
                    count=self.count,
                    owed=owed,
                    waited_on=job.waited_on,
                )
            elif job.promotion != "off":
                self._promotions.apart(job, facts, count=self.count, owed=owed)
        return CompactionResult(version, span.end_pos, folded, span.before, after)
