"""Compactions that a process never ended: closed with ``context.compaction.failed``.

A compaction whose process died between its ``context.compaction.started`` and its partner
(a SIGKILL, a lost host) leaves the started event alone; a console waiting for the pair would
wait forever. ``Closer`` persists the partner, reason ``interrupted``: when the session's
next compaction starts (``close_session``, under that compaction's claim), at start-up
(``at_start``) for every session whose compaction claim is free, and as a stop cancels
compactions (``after_stop``), for theirs. One cut after it stored its summary (between the
insert and the completed event) gets the ``context.compaction.completed`` it never wrote:
that summary is in use, so the compaction did not fail.

A claim the dead process held outlives it by up to the lease's time to live (it was renewed
until the process died), so start-up leaves such a session and a background pass tries it
again every third of the time to live until the claim is free, or the compaction behind it,
alive on another replica, ended by itself. A session whose row another transaction holds
locked is skipped too (``SKIP LOCKED``: the start does not wait for it) and tried again as
often for as long as the lock lasts, which nothing bounds as the claim's time to live does.
The sweep takes a session's claim as a compaction does, and hands it back with the backoff
a failed compaction left on it (``Claim.backoff_until``) as it was: a session backing off
does not start compacting again because the proxy restarted.
A start that finds no database (or whose pass it refuses) sweeps again in the background,
as often, until it answers: a compaction's own look closes the session's latest started
event only, so older ones (two in a row an older version left) are the sweep's alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

import asyncpg

from proxy.bus import EventBus
from proxy.cascade.types import COMPACTION_COMPLETED, COMPACTION_FAILED
from proxy.observe import note_swept_compaction
from proxy.services.leases import Leases
from proxy.store import events, leases as claims, nul, summaries
from proxy.store.db import DatabaseUnavailable, PoolExhausted, borrowed

__all__ = ["Closer", "INTERRUPTED", "said_cut"]

log = logging.getLogger("cascade.compaction")

INTERRUPTED = "interrupted"
"""The ``reason`` of the failed event that closes a compaction its process never ended."""

Key = tuple[str, str]


def said_cut(session_id: str, ran: bool = True) -> None:
    """The WARNING of a compaction of ``session_id`` the stop cancelled, background or
    waited for by its request: the summary it was making is lost now, which the log says
    rather than the next start's sweep, or nothing on a replica scaled down. One that had
    not ``ran`` (a background one still waiting for its claim) lost nothing: it never
    started, and the session's next request over its threshold starts another. It names
    the session, never the tenant (a pass-through client's credential)."""
    if not ran:
        log.warning(
            "compaction of session %s cancelled by the stop before it started (it waited "
            "for its claim): nothing was folded, and the session's next request compacts it",
            session_id,
        )
        return
    log.warning(
        "compaction of session %s cancelled by the stop: a summary it had not stored "
        "is lost, and the session's next compaction folds its span again",
        session_id,
    )


class Closer:
    def __init__(
        self, pool: asyncpg.Pool, bus: EventBus, leases: Leases, acquire_timeout: float
    ) -> None:
        self.pool, self.bus, self.leases = pool, bus, leases
        self.acquire_timeout = acquire_timeout
        self._later: asyncio.Task[None] | None = None
        self._locked: set[Key] = set()  # of the last pass's sessions left, those whose row
        # was locked (their claim free): ``_again`` counts no try for them

    async def at_start(self) -> int:
        """Close what no process runs any more; returns how many closed now. A session
        whose claim is held is tried again in the background, and every session when the
        database is not there now (module docstring), or refuses the pass: a statement
        cancelled or refused is no failed start."""
        try:
            closed, held = await self._pass(None)
        except Exception as exc:  # as no database: every session again, in the background
            log.warning("interrupted compactions not closed yet: %s", exc)
            closed, held = 0, None
        if closed:
            log.warning("closed %d compaction(s) interrupted by a stop", closed)
        if held is None or held:
            self._later = asyncio.create_task(self._again(held), name="close-interrupted")
        return closed

    async def after_stop(self, cut: set[Key], running: set[Key] | None = None) -> None:
        """Close the compactions of ``cut``, the sessions whose compaction the stop just
        cancelled (their claims released), as the next start would: a replica scaled down
        starts no more. One the database does not take now is left to that sweep.

        Each cut compaction is one WARNING naming its session (never its tenant, a
        pass-through client's credential), ``said_cut``: for one of ``running`` (None: all
        of them) the summary it was making is lost, which the log says now rather than at
        the next start's sweep, or never on a replica scaled down; one still waiting for its
        claim never started."""
        if not cut:
            return
        for key in sorted(cut):
            said_cut(key[1], ran=running is None or key in running)
        try:
            closed, _ = await self._pass(cut)
        except Exception as exc:
            log.warning("interrupted compactions not closed yet: %s", exc)
            return
        if closed:
            log.info("closed %d compaction(s) this stop interrupted", closed)

    async def after_cut(self, key: Key, counts: bool = False) -> None:
        """Close the compaction of ``key`` a stop cut, in its own task once its claim is
        released: a waited-on one (its WARNING said, its end counted as it was cut), as
        ``after_stop`` closes a background one, so no replica's next compaction of the
        session closes it again and counts it a second time; and one cut during its summary's
        insert, whose end only the close knows (stored: completed), which ``counts`` it then.
        One the database does not take now is left to the next start's sweep."""
        try:
            closed, _ = await self._pass({key}, counts=counts)
        except Exception as exc:
            log.warning("interrupted compactions not closed yet: %s", exc)
            return
        if closed:
            log.info("closed %d compaction(s) this stop interrupted", closed)

    async def aclose(self) -> None:
        if self._later is not None:
            self._later.cancel()
            with contextlib.suppress(BaseException):
                await self._later

    async def _pass(
        self, only: set[Key] | None, quiet: bool = False, counts: bool = True
    ) -> tuple[int, set[Key] | None]:
        """Close what is unpaired (in ``only``'s sessions, if named) and unclaimed; return
        how many, and the sessions left because their claim was held: None when the
        database was not there (``quiet``: not logged again), so none is known closed.
        ``counts``: whether a close counts its result (``close_session``)."""
        closed, held, locked = 0, set(), set()
        owner, ttl = uuid.uuid4(), self.leases.ttl
        try:
            async with borrowed(self.pool, self.acquire_timeout) as conn:
                for tenant, session_id in await events.fetch_sessions_with_unpaired_compactions(
                    conn
                ):
                    if only is not None and (tenant, session_id) not in only:
                        continue
                    claim = await claims.claim_compaction(
                        conn,
                        tenant=tenant,
                        session_id=session_id,
                        owner=owner,
                        ttl=ttl,
                        skip_locked=True,  # a locked row is tried again later (``_again``)
                    )
                    if claim is None:
                        held.add((tenant, session_id))
                        if await claims.claim_free(conn, tenant=tenant, session_id=session_id):
                            locked.add((tenant, session_id))  # its row, not its claim, held
                        continue
                    try:
                        closed += await self.close_session(
                            conn, tenant, session_id, every=True, counts=counts
                        )
                    finally:  # a failure's backoff the claim took over stays
                        await claims.release_compaction(
                            conn,
                            tenant=tenant,
                            session_id=session_id,
                            owner=owner,
                            until=claim.backoff_until,
                        )
        except (DatabaseUnavailable, PoolExhausted) as exc:
            if not quiet:
                log.warning("interrupted compactions not closed yet: %s", exc)
            return closed, None
        self._locked = locked
        return closed, held

    async def _again(self, held: set[Key] | None) -> None:
        """Try the sessions whose claim was held again (every session: None), a third of
        the time to live apart: for as long as three times it once the database answers,
        and until it does (a pass it refuses is tried again, the first of each run of
        refusals logged, then every 60th); a session whose row was locked, its claim free,
        for as long as the lock lasts (a pass that leaves only such sessions counts no try)."""
        tries, refused = 0, 0
        while held is None or held:
            await asyncio.sleep(self.leases.ttl / 3)
            try:
                closed, left = await self._pass(held, quiet=True)
            except Exception as exc:  # a statement refused: as no database, not the task's end
                refused += 1
                if refused == 1 or refused % 60 == 0:
                    log.warning("interrupted compactions not closed yet (%d): %s", refused, exc)
                continue
            refused = 0  # answered: a later refusal starts a new run
            if closed:
                log.warning("closed %d compaction(s) interrupted by a stop", closed)
            if left is None:  # no database yet: the same sessions again, untimed
                continue
            tries += 1 if left - self._locked else 0
            held = left if tries < 9 else left & self._locked

    async def close_session(
        self, conn: Any, tenant: str, session_id: str, every: bool = False, counts: bool = True
    ) -> int:
        """Persist ``context.compaction.failed`` (reason ``interrupted``) for each started
        compaction of the session that has no partner: its latest (a compaction's look,
        before it starts: every one before it closed those older), or ``every`` one (the
        start-up sweep, which also closes what an older version left). The caller holds the
        session's compaction claim, so none of them is running: its process stopped, or lost its
        database between the two events. The event carries the started one's fields
        (``started_id`` names it) and what a failure leaves: the state before it. What the
        interrupted run took (attempts, duration) is unknown: null. One cut after its summary
        was stored is closed as completed instead (:meth:`_completed`). A close counts its
        result in the request it runs in, unless ``counts`` is off (its run counted it)."""
        rows = await events.fetch_unpaired_compactions(
            conn, tenant=tenant, session_id=session_id, every=every
        )
        for row in rows:
            started = nul.decode_json(row["data"])
            if (stored := await summaries.fetchrow_stored_by(conn, row["id"])) is not None:
                done = await self._completed(conn, tenant, session_id, row["id"], started, stored)
                if counts:
                    note_swept_compaction(COMPACTION_COMPLETED, done)
                continue
            failed = {
                "trigger": started.get("trigger"),
                "reason": INTERRUPTED,
                "error": "interrupted: the process running it stopped before it ended",
                "attempts": None,
                "duration_ms": None,
                "started_id": row["id"],
                "from_pos": started.get("from_pos"),
                "to_pos": started.get("to_pos"),
                "tokens_before": started.get("tokens_before"),
                "tokens_after": started.get("tokens_before"),
                "summary_version": started.get("summary_version"),
            }
            await self.bus.publish(
                conn, tenant=tenant, session_id=session_id, name=COMPACTION_FAILED, data=failed
            )
            if counts:
                note_swept_compaction(COMPACTION_FAILED, failed)
        return len(rows)

    async def _completed(
        self,
        conn: Any,
        tenant: str,
        session_id: str,
        started_id: int,
        started: dict[str, Any],
        stored: dict[str, Any],
    ) -> dict[str, Any]:
        """Persist the ``context.compaction.completed`` a compaction cut after storing its
        summary never wrote: the summary is there, in use. What only the run knew (the
        prompt's tokens after it, the ledger's counts) is null."""
        completed = {
            "trigger": started.get("trigger"),
            "summary_version": stored["version"],
            "from_pos": started.get("from_pos"),
            "to_pos": started.get("to_pos"),
            "folded_messages": None,
            "tokens_before": started.get("tokens_before"),
            "tokens_after": None,
            "duration_ms": stored["duration_ms"],
            "identifiers_kept": None,
            "identifiers_added": None,
            "identifiers_dropped": None,
            "started_id": started_id,
        }
        await self.bus.publish(
            conn, tenant=tenant, session_id=session_id, name=COMPACTION_COMPLETED, data=completed
        )
        return completed
