"""DurableSummarizer: fold old history into a versioned, structured briefing.

- Soft threshold: a background task per session (deduplicated in-process by a task map and
  across replicas by a claim on the session row, ``store.leases.claim_compaction``); the
  request that crossed it is not delayed.
- Hard threshold, overflow, ``/compact`` and the API: synchronous — wait for the compaction in
  flight (polling the same claim), then compact again if still needed.
- The claim is taken and released by short statements and renewed by the replica
  (``services/leases.py``) while the fast model answers; a connection is borrowed only for
  the statements before the call and after it, none is held while the fast model thinks.
- The fast model is called through the same provider machinery; its input is pre-truncated to
  its own window; failures are retried (at most ``summarize.maxAttempts`` ≤ 3) and then
  reported as ``context.compaction.failed`` with the previous state left intact.
- A summary is written only if the message at its boundary is still the live one (the history
  may have diverged while the fast model was thinking).
- A compaction whose process died between its ``context.compaction.started`` and its partner
  gets a ``context.compaction.failed`` with reason ``interrupted``: at start-up
  (``close_interrupted``), and when the session's next compaction starts; a console waiting
  for the pair never waits forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import asyncpg

from proxy.bus import EventBus
from proxy.cascade.briefing import parse_briefing
from proxy.cascade.ledger import apply_ledger
from proxy.cascade.pipeline import drop_commands
from proxy.cascade.summary import (
    build_prompt,
    build_reflect_prompt,
    fold_summary,
    needs_reflect,
    plan_compaction,
)
from proxy.cascade.types import (
    COMPACTION_COMPLETED,
    COMPACTION_FAILED,
    COMPACTION_STARTED,
    TokenCounter,
)
from proxy.config import Config, ModelConfig, ProviderConfig, SummarizeConfig
from proxy.observe import note_compaction_event
from proxy.services.fastmodel import ask_fast_model
from proxy.services.interrupted import Closer
from proxy.services.leases import Leases
from proxy.services.memory import patterns_for, scope_of_agent
from proxy.services.promotion import promote
from proxy.store import leases as claims, messages as msgs, sessions, steps, summaries
from proxy.store.db import (
    Connection,
    DatabaseUnavailable,
    Lent,
    PoolExhausted,
    borrowed,
    unavailable_when_lost,
)
from proxy.upstream import Upstream

__all__ = ["DurableSummarizer", "CompactionJob", "CompactionResult"]

log = logging.getLogger("cascade.compaction")
_SUMMARY_OUTPUT_TOKENS = 2000


@dataclass(frozen=True, slots=True)
class CompactionJob:
    tenant: str
    session_id: str
    provider: ProviderConfig
    fast_model: str
    fast_limits: ModelConfig
    cfg: SummarizeConfig
    headers: Mapping[str, str]
    trigger: str
    promotion: str = "off"  # context.memoryPromotion.mode (services/promotion.py)
    memory_scope: str = "global"
    memory_patterns: tuple[re.Pattern[str], ...] = ()


@dataclass(frozen=True, slots=True)
class CompactionResult:
    version: int | None
    boundary: int | None
    folded: int
    tokens_before: int
    tokens_after: int
    reason: str = ""
    failed: bool = False  # the fast model could not give a summary (not: nothing to fold)


def job_for(
    cfg: Config,
    *,
    tenant: str,
    session_id: str,
    agent: str,
    model: str,
    headers: Mapping[str, str],
    trigger: str,
) -> CompactionJob:
    agent_cfg = cfg.agents.get(agent) or cfg.agent_for(None)[1]
    fast = agent_cfg.fast_model or model
    scope = scope_of_agent(cfg, agent)
    return CompactionJob(
        tenant=tenant,
        session_id=session_id,
        provider=cfg.providers[agent_cfg.provider],
        fast_model=fast,
        fast_limits=cfg.model_limits(fast),
        cfg=cfg.context_for(agent).summarize,
        headers={k: v for k, v in headers.items() if k.lower() == "authorization"},
        trigger=trigger,
        promotion=cfg.context_for(agent).memory_promotion.mode,
        memory_scope=scope,
        memory_patterns=tuple(patterns_for(cfg, scope)),
    )


class SummaryCallError(RuntimeError):
    """The fast model could not produce a usable briefing."""


class DurableSummarizer:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        upstream: Upstream,
        bus: EventBus,
        count: TokenCounter,
        acquire_timeout: float = 10.0,
        leases: Leases | None = None,
    ) -> None:
        self.pool = pool
        self.leases = leases or Leases(pool, ttl=steps.LEASE_TTL, acquire_timeout=acquire_timeout)
        self.acquire_timeout = acquire_timeout
        self.upstream = upstream
        self.bus = bus
        self.count = count
        self._tasks: dict[tuple[str, str], asyncio.Task[CompactionResult | None]] = {}
        self._closer = Closer(self.pool, bus, self.leases, acquire_timeout)

    # -- entry points ------------------------------------------------------------------

    def start_background(self, job: CompactionJob) -> bool:
        """Start a compaction unless one is already running for this session here."""
        key = (job.tenant, job.session_id)
        if key in self._tasks and not self._tasks[key].done():
            return False
        task = asyncio.create_task(self._run_background(job), name=f"compact:{job.session_id}")
        self._tasks[key] = task
        task.add_done_callback(
            lambda t: self._tasks.pop(key, None) if self._tasks.get(key) is t else None
        )
        return True

    def running(self, tenant: str, session_id: str) -> bool:
        """True while a compaction of the session runs here (it may still make room)."""
        task = self._tasks.get((tenant, session_id))
        return task is not None and not task.done()

    async def wait_inflight(self, tenant: str, session_id: str) -> None:
        task = self._tasks.get((tenant, session_id))
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    async def compact_now(self, job: CompactionJob) -> CompactionResult | None:
        """Synchronous: wait for whatever is in flight (here or on another replica), then run.

        The caller holds no connection while it waits: a chat request gives its own back
        first (it keeps its session by its lease).
        """
        await self.wait_inflight(job.tenant, job.session_id)
        return await self._run(job, wait=True)

    async def close_interrupted(self) -> int:
        """At start-up: close every compaction no process is running any more
        (``interrupted.Closer.at_start``); returns how many closed now."""
        return await self._closer.at_start()

    async def _claim(self, conn: Any, tenant: str, session_id: str, owner: uuid.UUID) -> bool:
        return await claims.claim_compaction(
            conn, tenant=tenant, session_id=session_id, owner=owner, ttl=self.leases.ttl
        )

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Connection]:
        async with borrowed(self.pool, self.acquire_timeout) as conn:
            yield conn

    async def aclose(self) -> None:
        await self._closer.aclose()
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(BaseException):
                await task

    # -- the work ----------------------------------------------------------------------

    async def _run_background(self, job: CompactionJob) -> CompactionResult | None:
        """A background compaction: skipped when no connection comes free in time (the next
        request over the soft threshold starts another)."""
        try:
            return await self._run(job, wait=False)
        except PoolExhausted as exc:
            log.warning("background compaction of session %s skipped: %s", job.session_id, exc)
            return None
        except DatabaseUnavailable as exc:  # its failure cannot be stored either
            log.warning(
                "background compaction of session %s lost the database (%s); it is "
                "closed as interrupted at the next start or compaction",
                job.session_id,
                exc,
            )
            return None

    async def _run(self, job: CompactionJob, *, wait: bool) -> CompactionResult | None:
        """Claim the session's compaction (waiting for the one in flight with ``wait``, else
        giving up to it), compact, release the claim."""
        owner = uuid.uuid4()
        delays = claims.poll_delays()
        while True:
            async with self._conn() as conn:
                if await self._claim(conn, job.tenant, job.session_id, owner):
                    break
                if not wait:
                    return None  # another replica is on it
                if (
                    await sessions.fetchrow_session(
                        conn, tenant=job.tenant, session_id=job.session_id
                    )
                    is None
                ):
                    return None
            await asyncio.sleep(next(delays))
        self.leases.claim(job.tenant, job.session_id, owner)
        try:
            return await self._compact(job)
        finally:
            self.leases.unclaim(job.tenant, job.session_id, owner)
            with contextlib.suppress(DatabaseUnavailable, PoolExhausted):  # it expires
                async with self._conn() as conn:
                    await claims.release_compaction(
                        conn, tenant=job.tenant, session_id=job.session_id, owner=owner
                    )

    async def _publish(
        self, conn: Any, job: CompactionJob, name: str, data: dict[str, Any]
    ) -> None:
        await self.bus.publish(
            conn,
            tenant=job.tenant,
            session_id=job.session_id,
            name=name,
            data={"trigger": job.trigger, **data},
        )
        note_compaction_event(name, data)  # the metrics' count of its result

    async def _compact(self, job: CompactionJob) -> CompactionResult | None:
        """Read and plan, call the fast model, write: a connection borrowed for the first
        and the last part only."""
        with unavailable_when_lost():
            async with Lent(self.pool, self.acquire_timeout) as lent:
                return await self._fold(lent, job)

    async def _fold(self, lent: Lent, job: CompactionJob) -> CompactionResult | None:
        conn = await lent.take()
        row = await sessions.fetchrow_session(conn, tenant=job.tenant, session_id=job.session_id)
        if row is None:
            return None
        await self._closer.close_session(conn, job.tenant, job.session_id)
        latest = await summaries.fetchrow_latest(conn, tenant=job.tenant, session_id=job.session_id)
        boundary = latest["boundary"] if latest else 0
        previous = latest["content"] if latest else None
        sc = row["system_count"]
        start = max(boundary, sc)
        rows = await msgs.fetch_window(
            conn, tenant=job.tenant, session_id=job.session_id, system_count=sc, from_pos=start
        )
        head = [r["message"] for r in rows if r["pos"] < sc]
        tail = [r for r in rows if r["pos"] >= start]
        # Plan in index space: trimmed messages leave gaps in positions.
        plan = plan_compaction(
            [r["message"] for r in tail],
            offset=0,
            boundary=0,
            keep_recent=job.cfg.keep_recent,
            previous=previous,
            system_count=0,
        )
        before = self.count(
            fold_summary(
                [*head, *(r["message"] for r in tail)], summary=previous, system_count=len(head)
            )
        )
        if plan is None:
            return CompactionResult(None, boundary, 0, before, before, "nothing to fold")
        # /compact exchanges were answered by the proxy: the fast model never sees them.
        plan = replace(plan, span=drop_commands(plan.span))
        t0 = time.monotonic()
        first, last = tail[plan.start], tail[plan.end - 1]
        end_pos = tail[plan.end]["pos"] if plan.end < len(tail) else last["pos"] + 1
        folded = plan.end - plan.start
        await self._publish(
            conn,
            job,
            COMPACTION_STARTED,
            {
                "from_pos": first["pos"],
                "to_pos": end_pos,
                "tokens_before": before,
                "summary_version": latest["version"] if latest else None,
            },
        )
        await lent.give_back()  # none held while the fast model answers
        try:
            content = await self._summarise(job, plan)
        except SummaryCallError as exc:
            conn = await lent.take()
            await self._publish(
                conn,
                job,
                COMPACTION_FAILED,
                {
                    "reason": "summary_failed",
                    "error": str(exc),
                    "attempts": job.cfg.max_attempts,
                    "duration_ms": round((time.monotonic() - t0) * 1000),
                    "tokens_before": before,
                    "tokens_after": before,
                    "summary_version": latest["version"] if latest else None,
                },
            )
            return CompactionResult(None, boundary, 0, before, before, str(exc), failed=True)
        conn = await lent.take()
        ledger = apply_ledger(content, plan.span, cap=job.cfg.ledger_cap)
        content = ledger.summary
        version = await summaries.insert_summary(
            conn,
            tenant=job.tenant,
            session_id=job.session_id,
            boundary=end_pos,
            boundary_hash=last["hash"],
            content=content,
            tokens=self.count([{"role": "user", "content": content}]),
            model=job.fast_model,
        )
        if version is None:
            reason = "the history changed while summarising; the summary was discarded"
            await self._publish(
                conn,
                job,
                COMPACTION_FAILED,
                {
                    "reason": "history_changed",
                    "error": reason,
                    "attempts": 1,
                    "duration_ms": round((time.monotonic() - t0) * 1000),
                    "tokens_before": before,
                    "tokens_after": before,
                    "summary_version": latest["version"] if latest else None,
                },
            )
            return CompactionResult(None, boundary, 0, before, before, reason)
        kept = [r["message"] for r in tail[plan.end :]]
        after = self.count(fold_summary([*head, *kept], summary=content, system_count=len(head)))
        await self._publish(
            conn,
            job,
            COMPACTION_COMPLETED,
            {
                "summary_version": version,
                "from_pos": first["pos"],
                "to_pos": end_pos,
                "folded_messages": folded,
                "tokens_before": before,
                "tokens_after": after,
                "duration_ms": round((time.monotonic() - t0) * 1000),
                "identifiers_kept": ledger.kept,
                "identifiers_added": ledger.added,
                "identifiers_dropped": ledger.dropped,
            },
        )
        if job.promotion != "off":
            await promote(self.upstream, self.bus, lent, job, plan.span)
        return CompactionResult(version, end_pos, folded, before, after)

    async def _summarise(self, job: CompactionJob, plan: Any) -> str:
        budget = max(1000, job.fast_limits.context_limit - _SUMMARY_OUTPUT_TOKENS - 500)
        prompt = build_prompt(plan, max_input_tokens=budget, count=self.count)
        text = await self._call(job, prompt)
        content = parse_briefing(text, previous=plan.previous)
        if needs_reflect(content, count=self.count, reflect_tokens=job.cfg.reflect_tokens):
            reflect = build_reflect_prompt(content, target_tokens=job.cfg.reflect_tokens // 2)
            with contextlib.suppress(SummaryCallError, ValueError):
                content = parse_briefing(await self._call(job, reflect), previous=content)
        return content

    async def _call(self, job: CompactionJob, prompt: list[Any]) -> str:
        """One fast-model call with bounded retries; returns text with the five sections."""
        last = "no attempt made"
        for attempt in range(job.cfg.max_attempts):
            body = {
                "model": job.fast_model,
                "messages": prompt,
                "max_tokens": _SUMMARY_OUTPUT_TOKENS,
                "temperature": 0,
            }
            try:
                status, text = await ask_fast_model(self.upstream, job, body)
                if status >= 400:
                    last = f"fast model answered {status}: {text}"
                else:
                    parse_briefing(text)  # raises ValueError when no section is recognisable
                    return text
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                last = f"unusable summary ({type(exc).__name__}: {exc})"
            except Exception as exc:  # transport errors (ProxyError) included
                last = f"{type(exc).__name__}: {exc}"
            log.warning("compaction of %s attempt %d failed: %s", job.session_id, attempt + 1, last)
            if attempt + 1 < job.cfg.max_attempts:  # no pause after the last attempt
                await asyncio.sleep(min(0.2 * (2**attempt), 2.0))
        raise SummaryCallError(last)
