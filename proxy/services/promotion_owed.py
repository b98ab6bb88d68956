"""The memory promotions a replica runs apart from any request, and the ones a session owes.

A summary stored with promotion on leaves its session owing the span's promotion
(``summaries.insert_summary``, in the insert's transaction), and the promotion's end settles
it (``promotion.promote``). :class:`Promotions` runs them in tasks of their own: after a
compaction the pressure started (a request waits for its summary, not its facts), and for a
request whose session row says one is owed past its due time (``resume``: the process that
stored the summary was stopped or killed before the facts were stored). A stop waits for them
within its grace (``stopping.within_grace``), and for a background compaction between its
summary's insert and its promotion's start (``owing``); what it cuts past the grace stays
owed, due at once, so the session's next request, on any replica, takes it over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import asyncpg

from proxy import requestlog
from proxy.cascade.commands import drop_commands
from proxy.cascade.redaction_calls import redact_written
from proxy.cascade.types import Message, TokenCounter
from proxy.services.promotion import promote
from proxy.stopping import StopClock, within_grace
from proxy.store import messages as msgs, summaries
from proxy.store.db import Lent, borrowed
from proxy.tasks import said_if_failed

__all__ = ["Promotions"]

log = logging.getLogger("cascade.memory")

Key = tuple[str, str]


class Promotions:
    """The promotion tasks of one replica (and the compactions owing one), each with its
    session's key."""

    def __init__(self, upstream: Any, bus: Any, pool: asyncpg.Pool, acquire_timeout: float) -> None:
        self.upstream, self.bus, self.pool = upstream, bus, pool
        self.acquire_timeout = acquire_timeout
        self._tasks: dict[asyncio.Task[Any], Key] = {}

    def apart(
        self,
        job: Any,
        span: Sequence[Message],
        *,
        count: TokenCounter,
        owed: tuple[int, int] | None = None,
    ) -> None:
        """:func:`promote` ``span`` in a task of its own, on a connection of its own: a
        compaction the pressure started has a request waiting for it (the hard threshold,
        the guard, or the next request behind a background one), and the summary is what
        that request needs, not the facts."""

        async def run() -> None:
            async with Lent(self.pool, self.acquire_timeout) as lent:
                await promote(self.upstream, self.bus, lent, job, span, count=count, owed=owed)

        self._keep(run(), job, "promote")

    def resume(self, job: Any, *, count: TokenCounter) -> None:
        """Take over the promotion the session owes (``summaries.take_owed``), for a request
        of the session (``job``, built for it: its fast model, its credentials), on the owed
        span's stored messages read as a compaction reads its span (``/compact`` exchanges
        dropped, redacted with the agent's patterns); nothing when another took it, and
        settled unpromoted when the agent's promotion is off now."""

        async def run() -> None:
            key = {"tenant": job.tenant, "session_id": job.session_id}
            try:
                async with Lent(self.pool, self.acquire_timeout) as lent:
                    conn = await lent.take()
                    if (owed := await summaries.take_owed(conn, **key)) is None:
                        return
                    if job.promotion == "off":  # turned off since: nothing to promote to
                        await summaries.settle_owed(conn, **key, span=owed)
                        return
                    rows = await msgs.fetch_window(conn, **key, system_count=0, from_pos=owed[0])
                    span: Sequence[Message] = drop_commands(
                        [r["message"] for r in rows if r["pos"] < owed[1]]
                    )
                    if job.redaction:
                        span = [redact_written(m, job.redaction)[0] for m in span]
                    log.info("memory promotion for %s: taking over the one owed", job.session_id)
                    await promote(self.upstream, self.bus, lent, job, span, count=count, owed=owed)
            except Exception as exc:  # it stays owed, for a later request
                log.warning(
                    "memory promotion owed by %s not taken over: %s",
                    job.session_id,
                    type(exc).__name__,
                )

        self._keep(run(), job, "promote-owed")

    @contextlib.contextmanager
    def owing(self, task: asyncio.Task[Any] | None, key: Key) -> Iterator[None]:
        """Count ``task`` (a background compaction; None: a request's, which the stop waits
        for as a request) among the promotions while the block runs: from its summary's
        insert to its promotion's start, as cut there the span's facts wait for the session's
        next request."""
        if task is not None:
            self._tasks[task] = key
        try:
            yield
        finally:
            if task is not None:
                self._tasks.pop(task, None)

    async def wait(self, clock: StopClock) -> None:
        """Wait for them within ``clock``'s grace."""
        lost = "their spans' facts wait for their sessions' next requests"
        await within_grace(clock, self._tasks, "memory promotion(s)", lost)

    async def cut(self) -> None:
        """Cancel what still runs, and make what it owed due at once (``summaries.due_now``)."""
        cut = dict(self._tasks)
        for task in cut:
            task.cancel()
        for task in cut:
            with contextlib.suppress(BaseException):
                await task
        if not cut:
            return
        with contextlib.suppress(Exception):  # due later, as after a kill
            async with borrowed(self.pool, self.acquire_timeout) as conn:
                await summaries.due_now(conn, set(cut.values()))

    def _keep(self, coro: Any, job: Any, name: str) -> None:
        task = asyncio.create_task(requestlog.apart(coro), name=f"{name}:{job.session_id}")
        self._tasks[task] = (job.tenant, job.session_id)
        task.add_done_callback(lambda t: self._tasks.pop(t, None))
        task.add_done_callback(said_if_failed(f"{name} of {job.session_id}"))
