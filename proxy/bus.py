"""Event bus: persist (unless transient), then fan out through Postgres LISTEN/NOTIFY.

Every replica LISTENs on one channel and hands each notification to its local subscribers
(open SSE streams), so a subscriber on one replica sees events another produced. Delivery to
local subscribers happens only through NOTIFY, even on the producing replica, so every
replica sees the same order. Persisted events are announced by a trigger on the ``events``
table (migration 0002), so a request inserts them inside statements it runs anyway. A
payload too big for NOTIFY (8000 bytes) carries only the row id and the listener reads the
row back, the session's later events waiting for it (``bus_order.py``); a transient one goes
out with its stamp and figures only, its lists dropped, marked ``truncated``, except a
delta, whose text is cut into pieces that each fit (``bus_payloads.pieces``).

A persisted event is announced only while some replica watches its session (migration
0004): ``subscribe`` registers the session in ``event_watchers`` before the caller replays,
and a keeper task refreshes this replica's rows while its streams are open; the session's
last stream to close here deletes its row, and writes it again should a stream have opened
on the session while the DELETE ran (whose registration it could undo). Requests on
sessions nobody streams (nearly all of them) then send no NOTIFY at all. The keeper also
reads the sessions other replicas watch, so ``watched`` answers from memory whether a
transient event would reach anyone (``services/deltas.py`` asks it while a reply streams):
this replica's own streams count at once, another replica's within one refresh. Streams also catch
up from the table now and then (api/events.py), which covers an event whose trigger ran just
before the registration committed, and notifications missed while the listener reconnected;
once it listens again, every open stream here is ended (:data:`RELISTENED`), for the
transient events it missed, which no table keeps; not through a transaction pooler, whose
LISTEN hears nothing, so that no stream missed a word of it.

The same connection LISTENs on ``cascade_lease`` (migration 0023), whose notifications say a
session's lease was freed while someone waited for it; ``wakeups`` wakes this replica's
waiters on it (``services/lease_wakeups.py``).

Deleting a session NOTIFYs on the same channel, in the statement that deletes it
(``store.sessions.delete_session``), a payload that names the session and no event
(``"gone": true``); each replica hands its streams on that session :data:`SESSION_GONE`,
after the events before it, and they end.

``config.*`` events concern every session: each replica watches its own config file and
broadcasts them to its own open streams (they are not session history, so not replayed).

The listening connection is the one this replica holds for its whole life, outside the pool:
it is opened from ``DATABASE_LISTEN_URL`` when set (``bus_listen.listen_url``). Behind a
transaction-mode pooler (``CASCADE_DB_POOLER=transaction``) that is a URL straight to
PostgreSQL, because a pooler that lends a server connection per transaction cannot carry a
LISTEN past it. NOTIFY is sent inside the statements that write events, which a pooler
carries like any other. A probe (:data:`PROBE_EVERY`) finds a listener gone silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

import anyio
import asyncpg

from proxy import bus_payloads
from proxy.bus_listen import (
    NEVER_HEALS,
    RELISTEN_EVERY,
    Losses,
    end_silent,
    listen,
    listen_url,
    until_lost,
)
from proxy.bus_order import InOrder
from proxy.bus_payloads import (
    LAGGED,
    RELISTENED,
    SESSION_GONE,
    BusEvent,
    stamp_now,
    transient_payload,
)
from proxy.cascade.types import TRANSIENT_EVENTS
from proxy.services.lease_wakeups import LEASE_CHANNEL, LeaseWakeups
from proxy.store import events as store
from proxy.store.db import DatabaseUnavailable, named, redact_dsn
from proxy.tasks import stop_task

__all__ = ["EventBus", "BusEvent", "LAGGED", "RELISTENED", "SESSION_GONE", "listen_url"]

log = logging.getLogger("cascade.bus")
WATCH_TTL = 30.0
"""Seconds an ``event_watchers`` row stays current; the keeper refreshes at a third of it."""
START_TIMEOUT = 30.0
"""Seconds the start waits for the listener's first connection (a database still starting)."""
PROBE_EVERY = 10.0
"""Seconds between the listener's probes: a connection a firewall or NAT forgot, or whose host
is lost, closes nothing, so only a question it cannot answer reveals it; the probe also keeps
an idle connection from looking idle to such a middlebox. The probe is its ``LISTEN`` again (a
no-op on a channel listened to; no prepared statement), so ``pg_stat_activity`` still shows
the connection as the listener. Through a transaction pooler it is ``SELECT 1``: a LISTEN
would leave each server the pooler lends it listening for good."""
PROBE_TIMEOUT = 5.0
"""Seconds a probe may take; a listener silent that long is dropped, said, and replaced."""
MAX_QUEUED = 1000
"""Events one subscriber may hold unread: a stream whose client reads nothing stops taking
from its queue once the socket's buffers are full, and past this bound is dropped."""


class EventBus:
    def __init__(
        self,
        pool: asyncpg.Pool,
        listen_dsn: str,
        listen_setting: str = "DATABASE_URL",
        *,
        pooled: bool = False,
    ) -> None:
        """``listen_setting`` names where ``listen_dsn`` comes from, for the messages that
        say it cannot be reached (the password masked); ``pooled``: it goes through a
        transaction pooler (``bus_listen.through_pooler``)."""
        self.pooled = pooled  # its LISTEN hears nothing: /readyz says so
        self._probe = "SELECT 1" if pooled else f"LISTEN {store.NOTIFY_CHANNEL}"
        self._pool = pool
        self._dsn = listen_dsn
        self._where = f"{redact_dsn(listen_dsn)} ({listen_setting})"
        self._failure = "no connection yet"  # why the listener last failed
        self._retrying = False  # a try failed since the listener last connected
        self._losses = Losses(self._where, pooled=pooled)  # what it says of its losses
        self._subs: dict[tuple[str, str], set[asyncio.Queue[BusEvent]]] = defaultdict(set)
        self._order = InOrder(self._deliver, self._deliver_row)  # a session's, as they came
        self._remote: frozenset[tuple[str, str]] = frozenset()  # other replicas' (keeper)
        self._watched_failing = False  # the last read of them failed: said once
        self._listener: asyncpg.Connection | None = None
        self._silent: set[int] = set()  # backends of listeners dropped for silence
        self._task: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        self.replica = uuid.uuid4()
        self.wakeups = LeaseWakeups()  # the waiters for sessions' leases (``cascade_lease``)

    async def start(self, timeout: float | None = None) -> None:
        """Listen; a listener still not connected after ``timeout`` seconds (default
        :data:`START_TIMEOUT`), or refused for a reason in :data:`NEVER_HEALS`, is a
        :class:`DatabaseUnavailable` naming its URL's setting and the reason."""
        timeout = START_TIMEOUT if timeout is None else timeout
        # the first connection: None, or the refusal of a URL that cannot work
        connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._supervise(connected), name="cascade-bus")
        self._keeper = asyncio.create_task(self._keep_watching(), name="cascade-bus-watch")
        try:
            async with asyncio.timeout(timeout):
                await connected
        except DatabaseUnavailable:
            await self.stop()
            raise
        except TimeoutError:
            await self.stop()
            raise DatabaseUnavailable(
                f"the event bus cannot LISTEN at {self._where}: no connection within "
                f"{timeout:g} s, the last attempt failed with {self._failure}"
            ) from None

    async def stop(self) -> None:
        for task in (self._task, self._keeper):
            if task:
                await stop_task(task)
        for tenant, session_id in list(self._subs):
            await self._unwatch(tenant, session_id)
        if self._listener and not self._listener.is_closed():
            with contextlib.suppress(Exception):  # a silent one is aborted after the timeout
                await self._listener.close(timeout=PROBE_TIMEOUT)

    async def _watch(self, keys: Sequence[tuple[str, str]]) -> None:
        try:
            await store.watch(self._pool, keys=keys, replica=self.replica, ttl_seconds=WATCH_TTL)
        except Exception as exc:  # streams still catch up from the table
            log.warning("could not register %d watched session(s): %s", len(keys), exc)

    async def _unwatch(self, tenant: str, session_id: str) -> None:
        with contextlib.suppress(Exception):  # the row expires anyway
            await store.unwatch(
                self._pool, tenant=tenant, session_id=session_id, replica=self.replica
            )

    async def _keep_watching(self) -> None:
        while True:
            await asyncio.sleep(WATCH_TTL / 3)
            if self._subs:
                await self._watch(list(self._subs))
            await self.refresh_watched()

    async def refresh_watched(self) -> None:
        """Read which sessions other replicas stream (one small SELECT per keeper round)."""
        try:
            self._remote = frozenset(await store.fetch_watched(self._pool, replica=self.replica))
        except Exception as exc:  # the last set stays; the next round tries again
            if not self._watched_failing:  # once per outage, not every round of it
                log.warning("could not read the sessions other replicas watch: %s", exc)
            self._watched_failing = True
        else:
            self._watched_failing = False

    def watched(self, key: tuple[str, str]) -> bool:
        """Whether some stream, here or (as of the keeper's last read) on another replica,
        watches the session ``key`` (tenant, session id): no statement."""
        return key in self._subs or key in self._remote

    async def _supervise(self, connected: asyncio.Future[None]) -> None:
        while True:
            try:
                self._listener = await asyncpg.connect(self._dsn, server_settings=named(self._dsn))
                channels = {store.NOTIFY_CHANNEL: self._on_notify, LEASE_CHANNEL: self._on_lease}
                await listen(
                    self._listener, channels, self._silent, PROBE_TIMEOUT, pooled=self.pooled
                )
                if not connected.done():
                    connected.set_result(None)
                elif self._retrying:
                    self._losses.back()
                    if not self.pooled:  # a LISTEN through the pooler heard nothing to miss
                        self._end_streams()
                self._retrying = False
                await end_silent(None if self.pooled else self._pool, self._silent, PROBE_TIMEOUT)
                listened = asyncio.get_running_loop().time()
                probing = (self._probe, self._losses, self._silent, PROBE_EVERY, PROBE_TIMEOUT)
                await until_lost(self._listener, *probing)  # closed, or silent: said
                self._retrying = True
                await asyncio.sleep(listened + RELISTEN_EVERY - asyncio.get_running_loop().time())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep the bus alive across database restarts
                if self._listener is not None and not self._listener.is_closed():
                    self._listener.terminate()  # still listening, it would hear each one twice
                self._failure = redact_dsn(f"{type(exc).__name__}: {exc}", self._dsn)
                sqlstate = getattr(exc, "sqlstate", None)
                unreadable = isinstance(exc, ValueError)  # asyncpg cannot parse the URL
                if (sqlstate in NEVER_HEALS or unreadable) and not connected.done():
                    connected.set_exception(
                        DatabaseUnavailable(
                            f"the event bus cannot LISTEN at {self._where}: {self._failure}",
                            sqlstate,
                        )
                    )
                    return
                # At start each try is said (the start waits on them); once running, the first
                # of an outage: the pool says the database is gone and back (store.outage).
                level = logging.DEBUG if connected.done() and self._retrying else logging.WARNING
                log.log(
                    level,
                    "event listener at %s failed (%s); retrying in 1s",
                    self._where,
                    self._failure,
                )
                self._retrying = True
                await asyncio.sleep(1.0)

    async def publish(
        self, conn: Any, *, tenant: str, session_id: str, name: str, data: Mapping[str, Any]
    ) -> int | None:
        """Persist a non-transient event (the table's trigger NOTIFYs), or NOTIFY a transient
        one; returns the event id (None if transient)."""
        body = {**data, "session_id": session_id, "ts": stamp_now()}
        if name not in TRANSIENT_EVENTS:
            return await store.insert_event(
                conn, tenant=tenant, session_id=session_id, name=name, data=body
            )
        await store.notify(conn, payload=transient_payload(tenant, session_id, name, body))
        return None

    split = staticmethod(bus_payloads.split)
    pieces = staticmethod(bus_payloads.pieces)

    def _on_lease(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        self.wakeups.notified(cast(str, payload))

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        msg = json.loads(cast(str, payload))  # asyncpg hands a NOTIFY payload over as text
        key = (msg["t"], msg["s"])
        if key not in self._subs:
            return
        self._order.hand(key, msg)

    async def _deliver_row(self, key: tuple[str, str], name: str, event_id: int) -> None:
        rows = await store.fetch_events_after(
            self._pool, tenant=key[0], session_id=key[1], after_id=event_id - 1, limit=1
        )
        if rows and rows[0]["id"] == event_id:
            self._deliver(key, BusEvent(name, rows[0]["data"], event_id))

    def _deliver(self, key: tuple[str, str], event: BusEvent) -> None:
        for queue in list(self._subs.get(key, ())):
            self._offer(key, queue, event)

    def _offer(self, key: tuple[str, str], queue: asyncio.Queue[BusEvent], event: BusEvent) -> None:
        """Queue ``event``; a subscriber already :data:`MAX_QUEUED` behind is dropped instead:
        its queue emptied down to :data:`LAGGED` and taken out of the session's subscribers."""
        if queue.qsize() < MAX_QUEUED:
            queue.put_nowait(event)
            return
        log.warning(
            "an event stream fell %d events behind (its client reads nothing); ending it",
            MAX_QUEUED,
        )
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(LAGGED)
        self._drop(key, queue)

    def _drop(self, key: tuple[str, str], queue: asyncio.Queue[BusEvent]) -> bool:
        """Take ``queue`` out of the session's subscribers, and the session out with its last
        one (a queue dropped already, as a lagging one is, is no longer there); whether the
        session is left with none."""
        subscribers = self._subs.get(key)
        if subscribers is not None:
            subscribers.discard(queue)
            if not subscribers:
                del self._subs[key]
        return key not in self._subs

    def _end_streams(self) -> None:
        """Hand every subscriber :data:`RELISTENED`, after what it holds: what was notified
        while the listener was away reached none of them."""
        for queues in list(self._subs.values()):
            for queue in list(queues):
                queue.put_nowait(RELISTENED)

    @property
    def listening(self) -> bool:
        """Whether the listener is connected now (``/readyz`` says so)."""
        return self._listener is not None and not self._listener.is_closed() and not self._retrying

    def broadcast_local(self, name: str, data: Mapping[str, Any]) -> None:
        """Deliver to every open stream on this replica (config.* events)."""
        for key, queues in list(self._subs.items()):
            event = BusEvent(name, {**data, "session_id": key[1], "ts": stamp_now()})
            for queue in list(queues):
                self._offer(key, queue, event)

    @contextlib.asynccontextmanager
    async def subscribe(
        self, tenant: str, session_id: str
    ) -> AsyncIterator[asyncio.Queue[BusEvent]]:
        queue: asyncio.Queue[BusEvent] = asyncio.Queue()
        key = (tenant, session_id)
        first = key not in self._subs
        self._subs[key].add(queue)
        try:
            if first:
                await self._watch([key])
            yield queue
        finally:
            if self._drop(key, queue):
                with anyio.CancelScope(shield=True):
                    await self._unwatch(tenant, session_id)
                    if key in self._subs:  # a stream opened while it ran: its row again
                        await self._watch([key])
