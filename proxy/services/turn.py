"""A Turn: one request's hold on its session, from its place in the queue to the stored reply.

It owns, for that request, the session's place in this replica's queue (``SessionLocks``),
the session's lease (``services/leases.py``: taken by the step's first statement, renewed by
the replica while the turn lasts), the step prepared, and a pooled connection only while the
step runs statements: ``connect`` before the step's first statement (its CPU work before
it: ``services/incoming.py``), ``park`` right after it (``history.reconcile_and_load``), so
that no connection is held while the window is assembled or the provider answers;
``connection()`` lends one for a statement between (a ``read_tool_output`` page), and the
last statement borrows one.

It also owns a new session's held-back messages (``hold``; ``services/history.py`` says why
they wait): the step's write takes them (``write_step``: they go in with the step's marks,
already evicted), and nothing else reads the session's store before they are in it: ``park``
stores them before it gives the connection back (a compaction may read the store while the turn
waits), ``flush`` before a background compaction starts, and ``abort`` before it frees the
lease, so a refused step still keeps what the client sent.

Exactly one of two things ends it, once, whoever calls first:

- ``finish(reply, prompt_tokens)`` stores the reply, the provider's real prompt size,
  ``context.usage`` and the per-turn values the step computed (``Step.turn``) in one
  statement that also releases the lease;
- ``abort()`` stores nothing of the step (a refused or failed call), only the messages
  still held back, and releases the lease in a statement of its own, which also raises the
  session's calibration when the provider refused the prompt as too long for its window
  (``services/window_learned.py``); if that fails (the database away) the lease expires
  by itself, and this replica's next request on the session takes it back at once.

Either way the next queued request goes. The Forwarder, the ``/compact`` answer and the
response's background task all end the turn through these two calls, so a second call (a
background task after a stream's own finish) does nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import asyncpg

from proxy import requestlog
from proxy.bus import EventBus
from proxy.cascade.tokens import calibrate
from proxy.cascade.types import MESSAGE_APPENDED, USAGE, Event
from proxy.history import chain_hash
from proxy.observe import note_occupancy
from proxy.services.chaincache import ChainCache
from proxy.services.leases import Leases
from proxy.services.request import Step
from proxy.services.session_locks import SessionLocks
from proxy.session_id import SessionKey
from proxy.store import leases as lease_rows, messages as msgs, steps, writes
from proxy.store.db import Connection, DatabaseUnavailable, PoolExhausted, acquire

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

__all__ = ["Turn"]

log = logging.getLogger("cascade.chat")


class Turn:
    """One request's session: its queue place, lease, connection and step (module
    docstring). Made once the request heads its session's queue here."""

    def __init__(
        self,
        key: SessionKey,
        *,
        pool: asyncpg.Pool,
        locks: SessionLocks,
        leases: Leases,
        chains: ChainCache,
        bus: EventBus,
        acquire_timeout: float,
    ) -> None:
        self.key = key
        self.step: Step | None = None
        self._conn: PoolConnectionProxy | None = None
        self._pool = pool
        self._locks = locks
        self._leases = leases
        self._chains = chains
        self._bus = bus
        self._timeout = acquire_timeout
        self._done = False
        self._began = False  # a statement ran that may have taken the lease
        self._held: writes.StepWrite | None = None  # a new session's messages, not yet stored
        record = requestlog.current()  # its id names the turn in its context.usage
        self.request_id = record.request_id if record is not None else None
        leases.hold(key)

    @property
    def owner(self) -> Any:
        """The lease's owner this turn's statements name (the replica's)."""
        return self._leases.owner

    @property
    def ttl(self) -> float:
        return self._leases.ttl

    @property
    def conn(self) -> PoolConnectionProxy:
        """The connection the step's statements run on, between ``connect`` and ``park``."""
        assert self._conn is not None, "the turn is connected while its step is prepared"
        return self._conn

    @property
    def prepared(self) -> Step:
        assert self.step is not None, "the turn's step is prepared before it is forwarded"
        return self.step

    async def connect(self) -> None:
        """Take a pooled connection for the step's statements (``db.acquire``: at most the
        pool's wait, then ``PoolExhausted``)."""
        if self._conn is None:
            self._conn = await acquire(self._pool, self._timeout)
            self._began = True

    def hold(self, write: writes.StepWrite) -> None:
        """Own a new session's messages, not yet stored, as the write that stores them
        (``history.reconcile_and_load``'s ``hold``; module docstring)."""
        self._held = write

    @property
    def holding(self) -> bool:
        """Whether a new session's messages are held back, to be stored with the step's marks."""
        return self._held is not None

    async def write_step(self, marks: writes.StepWrite) -> None:
        """The step's one write (``store.writes.write_step``): its ``marks``, and the
        messages held back, which then go in already evicted and trimmed. A step with
        nothing to write takes no connection (the turn may have parked after its first
        statement)."""
        w = marks if self._held is None else self._held.joined(marks)
        if w.empty:
            return
        await self.connect()
        await self._write(self.conn, w, best_effort=False)
        self._held = None

    async def flush(self) -> None:
        """Store the messages held back, alone, on the turn's connection: before anything
        else may read the session's store (a background compaction)."""
        if self._held is not None:
            await self.write_step(writes.StepWrite())

    async def park(self) -> None:
        """Give the connection back, having stored what is held back (``flush``): the
        session stays this turn's by its lease, and whatever runs meanwhile (a compaction)
        reads every message the client sent."""
        conn = self._conn
        if conn is None:
            return
        try:
            await self.flush()
        finally:
            self._conn = None
            await self._pool.release(conn)  # asyncpg shields it from cancellation

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[PoolConnectionProxy]:
        """The turn's connection if it holds one, else one borrowed for the block. A held
        connection that died (asyncpg lets go of a pooled connection lost while held) is
        given back and another borrowed, so the turn's last statement still runs, and frees
        the lease at once, when only that connection went (a backend terminated, a pooler
        restarted) and the database is still there."""
        if self._conn is not None and _lost(self._conn):
            lost, self._conn = self._conn, None
            await self._pool.release(lost)
        if self._conn is not None:
            yield self._conn
            return
        conn = await acquire(self._pool, self._timeout)
        try:
            yield conn
        finally:
            await self._pool.release(conn)

    async def abort(self, calibration: float | None = None) -> None:
        """End the turn storing nothing of the step, and free the lease (idempotent); a
        ``calibration`` learned from the provider's refusal for length
        (``services/window_learned.py``) goes into the same statement."""
        if self._done:
            return
        self._done = True
        if not self._began:  # no connection was ever had: no lease was taken
            await self._release()
            return
        try:
            async with self.connection() as conn:
                if self._held is not None:  # what the client sent is kept all the same
                    held, self._held = self._held, None
                    await self._write(conn, held, best_effort=True)
                await lease_rows.release_lease(
                    conn,
                    tenant=self.key.tenant,
                    session_id=self.key.session_id,
                    owner=self.owner,
                    calibration=calibration,
                )
        except Exception as exc:  # it expires by itself (module docstring)
            log.warning("could not release the lease of session %s: %s", self.key.session_id, exc)
        finally:
            await self._release()

    async def _write(self, conn: Connection, w: writes.StepWrite, *, best_effort: bool) -> None:
        """Run ``store.writes.write_step`` for this turn's session: the one path the step's
        write, ``flush`` and ``abort`` share. ``best_effort`` (``abort``) logs a failure and
        goes on, so the lease is freed all the same (the client resends the messages); else
        it raises to the step's caller."""
        try:
            await writes.write_step(
                conn, tenant=self.key.tenant, session_id=self.key.session_id, w=w
            )
        except Exception as exc:
            if not best_effort:
                raise
            log.warning(
                "could not store the held-back messages of session %s: %s",
                self.key.session_id,
                exc,
            )

    async def finish(
        self,
        reply: Mapping[str, Any] | None,
        prompt_tokens: int | None,
        *,
        calibration: float | None = None,
    ) -> None:
        """Store the reply, the real prompt size and ``context.usage``; end the turn. A
        ``calibration`` learned from a later round's refusal for length (a stream's in-band
        error: ``services/window_learned.py``) raises the session's.

        One statement after the answer (reply + head + usage + events, the events table's
        trigger NOTIFYs them, and the lease's release), on a connection borrowed for it.
        Idempotent: only the first call stores.
        """
        if self._done:
            return
        self._done = True
        try:
            if self.step is not None:
                async with self.connection() as conn:
                    stored = await self._record(conn, self.step, reply, prompt_tokens, calibration)
                if not stored:
                    self._chains.set_head(self.key, None)
                    log.warning(
                        "the lease of session %s expired under its request; its reply was "
                        "not stored",
                        self.key.session_id,
                    )
        except (DatabaseUnavailable, PoolExhausted) as exc:  # its cause, no traceback
            self._chains.set_head(self.key, None)
            log.warning("could not record the reply of session %s: %s", self.key.session_id, exc)
        except Exception:
            self._chains.set_head(self.key, None)
            log.exception("could not record the reply of session %s", self.key.session_id)
        finally:
            await self._release()

    async def _record(
        self,
        conn: Connection,
        step: Step,
        reply: Mapping[str, Any] | None,
        prompt_tokens: int | None,
        learned: float | None = None,
    ) -> bool:
        state, row = step.state, step.state.session
        estimate = step.assembled.tokens + step.overhead  # as the provider counts it
        ratio = row["calibration"]
        real = prompt_tokens if isinstance(prompt_tokens, int) and prompt_tokens > 0 else None
        if real is not None:
            ratio = calibrate(ratio, real=real, estimated=estimate)
        if learned is not None:
            ratio = max(ratio, learned)
        stored = None
        if reply:
            stored = msgs.NewMessage(
                pos=state.head_len,
                hash=chain_hash(state.head_hash or "", reply),
                role="assistant",
                message=dict(reply),
                tokens=step.count.one(reply),
                source="upstream",
            )
        limit = step.route.limits.context_limit
        used = real if real is not None else round(estimate * ratio)
        note_occupancy(used)
        events = [
            Event(
                USAGE,
                {
                    "prompt_tokens": real,
                    "estimated_tokens": estimate,
                    "occupancy": used,
                    "limit": limit,
                    "fraction": round(used / limit, 4) if limit else None,
                    "calibration": round(ratio, 4),
                    "model": step.route.model,
                    "reclaimed_tokens": row["reclaimed_tokens"] + step.reclaimed,
                    "request_id": self.request_id,
                },
            )
        ]
        if stored is not None:
            events.insert(
                0,
                Event(
                    MESSAGE_APPENDED,
                    {
                        "from_pos": stored.pos,
                        "count": 1,
                        "superseded": 0,
                        "source": "upstream",
                    },
                ),
            )
        tenant, session_id = self.key
        persisted, _ = self._bus.split(tenant, session_id, events)
        if stored is not None:
            # Before the statement, not after it: the client may send its next request the
            # moment it has this reply, and that request reads the guess at once.
            self._chains.set_head(self.key, (stored.pos + 1, stored.hash))
        return await steps.record_step(
            conn,
            tenant=tenant,
            session_id=session_id,
            reply=stored,
            prompt_tokens=real,
            estimate=estimate,
            calibration=ratio,
            events=persisted,
            owner=self.owner,
            turn=step.turn,
        )

    async def _release(self) -> None:
        """Give the connection back, stop renewing, then leave this replica's queue."""
        try:
            await self.park()
        finally:
            self._leases.drop(self.key)
            self._locks.release(self.key)


def _lost(conn: PoolConnectionProxy) -> bool:
    """Whether ``conn`` is closed, or already let go by asyncpg's pool (whose proxy then
    refuses every call)."""
    try:
        return conn.is_closed()
    except asyncpg.InterfaceError:
        return True
