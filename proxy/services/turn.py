"""A Turn: one request's hold on its session, from its place in the queue to the stored reply.

It owns, for that request, the session's place in this replica's queue (``SessionLocks``),
the pooled connection whose first statement took the session's advisory lock, and the step
prepared on it. Exactly one of two things ends it, once, whoever calls first:

- ``finish(reply, prompt_tokens)`` stores the reply, the provider's real prompt size,
  ``context.usage`` and the per-turn values the step computed (``Step.turn``) in one
  statement that also releases the advisory lock;
- ``abort()`` stores nothing (a refused or failed call): the pool's reset releases the
  advisory lock (``store.db._reset``), so the next request never finds it held.

Either way the connection goes back to the pool and the next queued request goes. The
Forwarder, the ``/compact`` answer and the response's background task all end the turn
through these two calls, so a second call (a background task after a stream's own finish)
does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from proxy.bus import EventBus
from proxy.cascade.pipeline import Assembled
from proxy.cascade.tokens import MemoCounter, calibrate
from proxy.cascade.types import MESSAGE_APPENDED, USAGE, Event
from proxy.config import ContextConfig, ModelConfig, ProviderConfig
from proxy.history import chain_hash
from proxy.observe import note_occupancy
from proxy.services.chaincache import ChainCache
from proxy.services.compaction import CompactionResult
from proxy.services.history import SessionState
from proxy.services.session_locks import SessionLocks
from proxy.session_id import SessionKey
from proxy.store import messages as msgs, sessions
from proxy.store.db import mark_unlocked

__all__ = ["ChatContext", "Route", "Step", "Turn"]

log = logging.getLogger("cascade.chat")


@dataclass(frozen=True, slots=True)
class ChatContext:
    tenant: str
    session_id: str
    headers: Mapping[str, str]
    derived: bool = False  # the id is derived, not the client's: it may move to a lane

    @property
    def key(self) -> SessionKey:
        return SessionKey(self.tenant, self.session_id)


@dataclass(frozen=True, slots=True)
class Route:
    agent: str
    provider: ProviderConfig
    model: str
    limits: ModelConfig
    ctx: ContextConfig


@dataclass(slots=True)
class Step:
    """What was prepared for the provider call: the state it read and the prompt it built."""

    ctx: ChatContext
    route: Route
    state: SessionState
    assembled: Assembled
    body: dict[str, Any]
    stream: bool
    client_wants_usage: bool
    count: MemoCounter
    command: CompactionResult | None = None
    reclaimed: int = 0  # tokens this step's eviction reclaimed
    overhead: int = 0  # estimated tokens of the tools sent beside the messages
    turn: tuple[str, str] | None = None  # the turn's key and per-turn values to keep (JSON)


class Turn:
    """One request's session: its queue place, connection and step (module docstring)."""

    def __init__(
        self,
        key: SessionKey,
        conn: Any,
        *,
        pool: asyncpg.Pool,
        locks: SessionLocks,
        chains: ChainCache,
        bus: EventBus,
    ) -> None:
        self.key = key
        self.conn = conn
        self.step: Step | None = None
        self._pool = pool
        self._locks = locks
        self._chains = chains
        self._bus = bus
        self._done = False

    @property
    def prepared(self) -> Step:
        assert self.step is not None, "the turn's step is prepared before it is forwarded"
        return self.step

    async def abort(self) -> None:
        """End the turn storing nothing (idempotent)."""
        if self._done:
            return
        self._done = True
        await self._release()

    async def finish(self, reply: Mapping[str, Any] | None, prompt_tokens: int | None) -> None:
        """Store the reply, the real prompt size and ``context.usage``; end the turn.

        One statement after the answer (reply + head + usage + events, the events table's
        trigger NOTIFYs them, and the session lock's release), so returning the connection
        to the pool costs no round trip. Idempotent: only the first call stores.
        """
        if self._done:
            return
        self._done = True
        try:
            if self.step is not None:
                await self._record(self.step, reply, prompt_tokens)
        except Exception:
            self._chains.set_head(self.key, None)
            log.exception("could not record the reply of session %s", self.key.session_id)
        finally:
            await self._release()

    async def _record(
        self, step: Step, reply: Mapping[str, Any] | None, prompt_tokens: int | None
    ) -> None:
        state, row = step.state, step.state.session
        estimate = step.assembled.tokens + step.overhead  # as the provider counts it
        ratio = row["calibration"]
        real = prompt_tokens if isinstance(prompt_tokens, int) and prompt_tokens > 0 else None
        if real is not None:
            ratio = calibrate(ratio, real=real, estimated=estimate)
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
        if await msgs.record_step(
            self.conn,
            tenant=tenant,
            session_id=session_id,
            reply=stored,
            prompt_tokens=real,
            estimate=estimate,
            calibration=ratio,
            events=persisted,
            unlock=sessions.session_lock_key(tenant, session_id),
            turn=step.turn,
        ):
            mark_unlocked(self.conn)

    async def _release(self) -> None:
        """Give the connection back, then the session's place in this replica's queue."""
        try:
            await self._pool.release(self.conn)  # asyncpg shields it from cancellation
        finally:
            self._locks.release(self.key)
