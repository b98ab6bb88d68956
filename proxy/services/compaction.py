"""DurableSummarizer: fold old history into a versioned, structured briefing.

- Soft threshold: a background task per session (deduplicated in-process by a task map and
  across replicas by a claim on the session row, ``store.leases.claim_compaction``); the
  request that crossed it is not delayed.
- Hard threshold, overflow, ``/compact`` and the API: synchronous — wait for the compaction in
  flight (polling the same claim), then compact again if still needed (a hard one that finds
  a newer summary folds nothing; its request measures again on it: ``services/pressure.py``).
- The claim is taken and released by short statements and renewed by the replica
  (``services/leases.py``) while the fast model answers; a connection is borrowed only for
  the statements before the call and after it, none is held while the fast model thinks.
- The fast model is called through the same provider machinery (``compaction_job.summarise``);
  its input is pre-truncated to its own window; failures are retried (at most
  ``summarize.maxAttempts`` ≤ 3) and then reported as ``context.compaction.failed`` with the
  previous state left intact.
- A summary is written only if the message at its boundary is still the live one (the history
  may have diverged while the fast model was thinking) and the compaction still holds its
  claim (the session may have been deleted, and made again under its id, meanwhile); one
  that lost its claim reports nothing more.
- A job is built with the settings of the session's agent (its fast model and provider,
  ``summarize``, the memory scope it promotes to). A session that runs another agent once
  the claim is held is not read; one moved while the fast model answered gets no summary
  (the insert checks the agent in its own statement): ``context.compaction.failed`` with
  reason ``agent_changed``, no backoff, so the new agent's own compaction may run at once.
- A compaction whose process died between its ``context.compaction.started`` and its partner
  gets a ``context.compaction.failed`` with reason ``interrupted``: at start-up
  (``close_interrupted``), and when the session's next compaction starts; a console waiting
  for the pair never waits forever.
- A failed one (``summary_failed``) leaves a backoff (``cascade.pressure.compaction_backoff``)
  on the session row, the claim's expiry with no owner: no replica's background compaction
  claims the session before it ends; the hard threshold, the guard and a forced one do. One
  put off by the answer budget (``server_busy``) leaves the backoff it found as it was.
- Memory promotion (``services/promotion.py``) follows a stored summary: inside a forced
  compaction, whose caller asked for all of it; in a task of its own after one the
  pressure started, whose waiting request needs the summary only. The summary's insert
  leaves the session owing it until it ends (``services/promotion_owed.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg

from proxy import requestlog
from proxy.answer_budget import RoomWait
from proxy.bus import EventBus
from proxy.cascade.types import TokenCounter
from proxy.observe import compaction_span, note_swept_compaction
from proxy.services.compaction_fold import INSERTING, Folding, Key
from proxy.services.compaction_job import CompactionJob
from proxy.services.compaction_span import CompactionResult
from proxy.services.interrupted import INTERRUPTED, Closer, said_cut
from proxy.services.leases import Leases
from proxy.services.promotion_owed import Promotions
from proxy.stopping import StopClock
from proxy.store import leases as claims, sessions, steps
from proxy.store.db import Connection, DatabaseUnavailable, PoolExhausted, borrowed
from proxy.tasks import said_if_failed
from proxy.upstream import Upstream

__all__ = ["DurableSummarizer", "CompactionResult"]

log = logging.getLogger("cascade.compaction")


class DurableSummarizer(Folding):
    """Every compaction of this replica (see the module): the background tasks, one per
    session, and the synchronous runs; each claims its session, then reads and plans, asks
    the fast model and writes (``compaction_fold.Folding``)."""

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        upstream: Upstream,
        bus: EventBus,
        count: TokenCounter,
        acquire_timeout: float = 10.0,
        leases: Leases | None = None,
        stop: StopClock | None = None,
    ) -> None:
        self.pool = pool
        self._stop = stop if stop is not None else StopClock()
        self.leases = leases or Leases(pool, ttl=steps.LEASE_TTL, acquire_timeout=acquire_timeout)
        self.acquire_timeout = acquire_timeout
        self.upstream = upstream
        self.bus = bus
        self.count = count
        self._tasks: dict[Key, asyncio.Task[CompactionResult | None]] = {}
        self._held: set[Key] = set()  # the background compactions that hold their claim
        self.ending: dict[Key, str] = {}
        self.rooms: dict[Key, RoomWait] = {}
        self._promotions = Promotions(upstream, bus, pool, acquire_timeout)
        self._closer = Closer(self.pool, bus, self.leases, acquire_timeout)

    # -- entry points ------------------------------------------------------------------

    def start_background(self, job: CompactionJob) -> bool:
        """Start a compaction unless one is already running for this session here."""
        key = (job.tenant, job.session_id)
        if key in self._tasks and not self._tasks[key].done():
            return False
        task = asyncio.create_task(
            requestlog.apart(self._run_background(job)), name=f"compact:{job.session_id}"
        )
        self._tasks[key], self.rooms[key] = task, RoomWait()

        def done(t: asyncio.Task[CompactionResult | None]) -> None:
            if self._tasks.get(key) is t:
                self._tasks.pop(key, None)
                self.rooms.pop(key, None)

        task.add_done_callback(done)
        task.add_done_callback(said_if_failed(f"background compaction of {job.session_id}"))
        return True

    def running(self, tenant: str, session_id: str) -> bool:
        """True while a compaction of the session runs here (it may still make room)."""
        task = self._tasks.get((tenant, session_id))
        return task is not None and not task.done()

    async def wait_inflight(self, tenant: str, session_id: str) -> None:
        """Wait for the compaction running here on the session, if one is: time the request
        waited for its session (``requestlog.session_wait``), not the proxy's own. A request
        waits on it now: its summary's waits for the budget's room end ``WAIT_SECONDS`` on,
        as a compaction's the request ran itself would (``RoomWait.join``)."""
        key = (tenant, session_id)
        if (task := self._tasks.get(key)) is not None and not task.done():
            if (room := self.rooms.get(key)) is not None:
                room.join()
            with requestlog.session_wait(), contextlib.suppress(Exception):
                await asyncio.shield(task)

    async def compact_now(
        self,
        job: CompactionJob,
        guard: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> CompactionResult | None:
        """Synchronous: wait for whatever is in flight (here or on another replica), then run.

        The caller holds no connection while it waits: a chat request gives its own back
        first (it keeps its session by its lease). Each wait, for the compaction running
        here and between two polls of a claim another compaction holds, runs in a
        ``guard()`` block (default: none); one that raises ends the wait, nothing claimed
        (the session API's, when its client leaves).
        """
        with guard():
            await self.wait_inflight(job.tenant, job.session_id)

        async def pause(seconds: float) -> None:  # another replica's compaction runs
            with guard(), requestlog.session_wait():
                await asyncio.sleep(seconds)

        return await self._run(dataclasses.replace(job, waited_on=True), wait=True, pause=pause)

    async def close_interrupted(self) -> int:
        """At start-up: close every compaction no process is running any more
        (``interrupted.Closer.at_start``); returns how many closed now."""
        return await self._closer.at_start()

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Connection]:
        async with borrowed(self.pool, self.acquire_timeout) as conn:
            yield conn

    async def aclose(self) -> None:
        """Wait within the stop's grace for the promotions running or owed (``Promotions``:
        their facts are not lost to a stop), then end what runs: a compaction still before its
        summary closes as interrupted (counted by ``_run``, as it is cut), and a later one
        folds its span again; a promotion cut is left owed to its session's next request."""
        try:
            await self._promotions.wait(self._stop)
        finally:
            await self._end_all()

    async def _end_all(self) -> None:
        await self._closer.aclose()
        cut = {key for key, task in self._tasks.items() if not task.done()}
        running = cut & self._held  # the others wait for their claim: none started
        tasks = list(self._tasks.values())
        for task in tasks:  # before the promotions' cut awaits: none gets past its insert then
            task.cancel()
        await self._promotions.cut()  # the compactions owing one among them: due at once
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        await self._closer.after_stop(cut, running)  # no replica may start again to sweep them

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

    async def _run(
        self,
        job: CompactionJob,
        *,
        wait: bool,
        pause: Callable[[float], Awaitable[None]] | None = None,
    ) -> CompactionResult | None:
        """Claim the session's compaction (waiting for the one in flight with ``wait``, else
        giving up to it, to a failure's backoff, or to a lock on the row that outlasts the
        claim's time to live), compact, release the claim."""
        owner, ttl = uuid.uuid4(), self.leases.ttl
        key = {"tenant": job.tenant, "session_id": job.session_id}
        delays, locked_until = claims.poll_delays(), time.monotonic() + ttl
        while True:
            async with self._conn() as conn:
                # a background compaction does not claim a session in a failure's backoff
                if claim := await claims.claim_compaction(
                    conn, **key, owner=owner, ttl=ttl, background=not wait, skip_locked=not wait
                ):
                    break
                if wait:
                    give_up = await sessions.fetchrow_session(conn, **key) is None
                else:  # the row locked by a short statement: tried again once it goes
                    free = await claims.claim_free(conn, **key, background=True)
                    give_up = not free or time.monotonic() > locked_until
                if give_up:
                    return None
            await (pause or asyncio.sleep)(next(delays))
        self.leases.claim(job.tenant, job.session_id, owner)
        held, result, close, counts = (job.tenant, job.session_id), None, False, False
        if not wait:
            self._held.add(held)
        try:
            with compaction_span(job.trigger):
                result = await self._compact(job, owner)
            return result
        except asyncio.CancelledError:  # a waited one is cut in its request's task
            if wait and self._stop.deadline is not None:
                said_cut(job.session_id)  # a background one's: the stop's (_end_all)
            end = self.ending.get(held) if not wait or self._stop.deadline is not None else None
            if end == INSERTING:  # stored or not: its close, here, finds out and counts it
                close, counts = True, True
            elif end is not None:  # its end, which the stop's close writes counting nothing
                note_swept_compaction(end, {"reason": INTERRUPTED})
                close = wait  # closed here once released (a background one's: _end_all)
            raise
        finally:
            self._held.discard(held)
            self.ending.pop(held, None)
            self.leases.unclaim(job.tenant, job.session_id, owner)
            with contextlib.suppress(DatabaseUnavailable, PoolExhausted):  # it expires
                async with self._conn() as conn:
                    await claims.release_compaction(
                        conn,
                        **key,
                        owner=owner,
                        backoff=result.backoff if result else None,
                        until=claim.backoff_until if claim and result and result.busy else None,
                    )
            if close:  # as the stop closes a background one (_end_all): no other replica
                await self._closer.after_cut(held, counts)  # closes it again, counting twice

    def resume_owed(self, job: CompactionJob) -> None:
        """Take over the promotion the session owes (``Promotions.resume``), for a request
        whose session row says one is owed past its due time."""
        self._promotions.resume(job, count=self.count)
