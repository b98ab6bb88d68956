"""GET /v1/sessions/{id}/events: the per-session SSE stream, with Last-Event-ID replay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from proxy import sse
from proxy.api import catch_up, event_cursor, reconnect
from proxy.api.catch_up import Reads
from proxy.api.deps import BusDep, PoolDep, SessionIdDep, TenantDep
from proxy.api.event_cursor import Cursor, frame as _frame
from proxy.api.event_stream import EventStream
from proxy.api.last_event_id import LAST_EVENT_ID, LAST_EVENT_ID_QUERY, after as _after
from proxy.auth import PROXY_KEY
from proxy.bus import LAGGED, RELISTENED, SESSION_GONE, BusEvent, EventBus
from proxy.errors import NotFound
from proxy.stopping import StopClock
from proxy.store import events as store, sessions

__all__ = ["router"]

router = APIRouter()


LIVE = {"comment": "live"}
"""The comment that ends the replay (``: live``): every event published from then on reaches
the stream, a transient one (``session.reset``) among them, so what a client reads after it
is current, and it need not wait for the first ping to know the stream is open."""

STOPPING = BusEvent("", {})
"""Put on a stream's queue as its app's stop begins (``stopping.StopClock``): the stream
ends, as sse-starlette's own stop ended it, but for this app's stop only."""

CATCH_UP_SECONDS = 2.0
"""How often an open stream also reads the table for events it was not told about."""

SEND_TIMEOUT_SECONDS = 30.0
"""How long a frame (a ping among them) may wait to go out before the stream is closed: its
client reads nothing, and the socket's buffers are full. The bus drops such a stream's queue
once it is ``bus.MAX_QUEUED`` behind, but the stream itself waits in that send, holding its
connection, until the client reads again, which a frozen one never does."""


def _reaches(request: Request, agent: str | None) -> bool:
    """Whether the stream's proxy key still reaches its session, run by ``agent`` (None:
    not known, or not yet run): the key is in the config in force (not revoked, its
    ``agents`` unchanged; a stream opened without one, in pass-through mode, until the
    config has keys) and, limited to some agents, ``agent`` is one of them (a request of
    another key may have moved the session). The gate judged the key when the stream
    opened; a stream can outlive that judgement by days."""
    key, keys = request.scope.get(PROXY_KEY), request.state.config.current.auth.keys
    if key is None:  # pass-through: the bearer is the tenant, until keys close the gate to it
        return not keys
    if key not in keys:
        return False
    return key.agents is None or agent is None or agent in key.agents


async def _lost(request: Request, pool: Any, tenant: str, session_id: str) -> bool:
    """Whether the stream's key no longer reaches its session (``_reaches``), asked before a
    live frame: a key limited to some agents reads the session's agent for it, since the
    frame may be the first of another agent's step."""
    key = request.scope.get(PROXY_KEY)
    if not _reaches(request, None):
        return True
    if key is None or key.agents is None:
        return False
    agent = await sessions.fetchval_agent(pool, tenant=tenant, session_id=session_id)
    return not _reaches(request, agent)


class _Live:
    """Judges a stream's live frames for its key (``_lost``), counting the events that were
    queued before the last read of the session's agent began (``judged``): published
    before it, they are judged by it, so the frames a burst queued cost one statement."""

    def __init__(
        self,
        request: Request,
        pool: Any,
        session: tuple[str, str, datetime],
        queue: asyncio.Queue[BusEvent],
    ) -> None:
        self.request, self.pool, self.queue = request, pool, queue
        self.tenant, self.session_id = session[0], session[1]
        self.judged = 0
        self.reads: Reads | None = None  # the session's shared reads, once it is live
        self.unread = False  # the last ``read_first`` met an outage
        # until then, events written as the stream registered may have gone unannounced
        self.unsure_until = asyncio.get_running_loop().time() + event_cursor.SETTLE_SECONDS

    def dequeued(self) -> bool:
        """One event taken off the queue: whether the last read judged it already."""
        queued, self.judged = self.judged > 0, max(0, self.judged - 1)
        return queued

    async def read_first(self, event: BusEvent, cursor: Cursor) -> AsyncIterator[dict[str, Any]]:
        """Before a persisted ``event`` heard live in the stream's first ``SETTLE_SECONDS``,
        the table's events past the mark up to it, ``event`` among them (its NOTIFY says it
        is committed): one committed before it whose announcement the registration missed
        comes first. A burst costs one read: for the rest, what it read ahead before each,
        after the first seconds too (one whose announcement never comes would follow a
        later event). In an outage, or on a busy pool (``catch_up.MISSED``), ``unread``:
        ``event`` is held back, to come with a catch-up once the database is back, after
        them."""
        self.unread = False
        if event.id is None or cursor.seen(event.id):
            return
        if cursor.ahead:  # read already: they go first, past the first seconds too
            last = cursor.ahead[-1].id or 0
            for earlier in cursor.before(event.id):
                yield _frame(earlier)
            if event.id <= last:
                return
        if asyncio.get_running_loop().time() >= self.unsure_until:
            return
        try:
            shared = (self.reads, None) if self.reads else None
            async for frame in cursor.catch_up(
                self.pool, self.tenant, self.session_id, upto=event.id, shared=shared
            ):
                yield frame
        except catch_up.MISSED:
            self.unread = True
            cursor.hold(event.id)

    async def judge(self, queued: bool) -> bool | None:
        """True to send the frame, False to end the stream, None to hold the frame back:
        its read of the agent met an outage or a busy pool, which, as a catch-up's, keeps
        the stream open."""
        if queued:
            return _reaches(self.request, None)
        self.judged = self.queue.qsize()  # the ones behind it, by the read now
        try:
            return not await _lost(self.request, self.pool, self.tenant, self.session_id)
        except catch_up.MISSED:
            self.judged = 0
            return None


async def _stream(
    request: Request,
    pool: Any,
    bus: EventBus,
    session: tuple[str, str, datetime],
    after: int,
    floor: int | None = None,
    got: frozenset[int] = frozenset(),
) -> AsyncIterator[dict[str, Any]]:
    """Subscribe first, then replay, so nothing published in between is missed or doubled;
    then say so (``LIVE``). Resumed after ``after`` (a Last-Event-ID), the replay reads from
    ``floor``, the session's last settled event up to it (``event_cursor.Cursor``); resumed
    from a resume token, from its mark, ``got`` the ids above it the client has.

    Live events come through the bus. Every ``CATCH_UP_SECONDS`` the stream also reads the
    table after the id it had read up to, skipping what it already sent, so an event that was
    never announced (its trigger ran before this stream's registration committed, or the
    listener was reconnecting) still arrives, a little later. The mark only moves over
    settled rows (``SETTLE_SECONDS``), so an id that commits after a higher one is still
    sent, live or by the next catch-up. For ``SETTLE_SECONDS`` after it opened, a persisted
    event heard live is sent after a read of the table (or, that read meeting an outage,
    with a catch-up once the database is back), so one committed before it whose
    announcement the registration missed comes first: a reconnect with the later one's id
    would skip it for good.

    The stream ends, the server closing it, once its session is deleted: at once when the
    bus says so (``SESSION_GONE``, from any replica), else at the next catch-up, which
    finds no session, or one made again under the id since (``session``: tenant, id and
    the ``created_at`` of the session the stream was opened on). A client that reconnects
    (an ``EventSource`` does) gets the 404 of a missing session (or a stream of the new
    one). No frame says why: the reconnect does. It ends the same way once its client
    fell ``bus.MAX_QUEUED`` events behind (``LAGGED``), and once the bus listens again
    after it lost its listener (``RELISTENED``): the reconnect replays; the last frame then
    tells the client when to reconnect, a time of its own, after the events it held back
    (``reconnect.last_frames``); so does a replay that meets an outage or a busy pool
    (``catch_up.MISSED``), with :func:`reconnect.frame` alone (the response has begun: it
    cannot be the 503 the opening read's is). It ends,
    before its next frame or catch-up, once its key no longer reaches the session
    (``_reaches``): the reconnect is then a 401 or a 403. A key limited to some agents is
    held to the session's agent that each catch-up reads in its one statement (the replay
    as the stream opens among them), and that a live frame reads before it goes
    (``_Live``): one read for it and the frames queued behind it as it starts, all
    published before it.
    """
    tenant, session_id, created_at = session
    async with bus.subscribe(tenant, session_id) as queue:
        cursor = Cursor(after, created_at, lambda agent: _reaches(request, agent), floor, got)
        try:
            async for frame in _resumable(cursor.catch_up(pool, tenant, session_id), cursor):
                yield frame
        except catch_up.MISSED:  # the response began: its end says when to come back
            yield reconnect.frame()  # no id: the reconnect replays from the last one sent
            return
        yield LIVE
        with catch_up.sharing(pool, tenant, session_id, created_at, cursor) as reads:
            live = _live(request, pool, session, queue, cursor, reads)
            async for frame in _resumable(live, cursor):
                yield frame


async def _resumable(
    frames: AsyncIterator[dict[str, Any]], cursor: Cursor
) -> AsyncIterator[dict[str, Any]]:
    """``frames``, each persisted event's followed by a frame of an ``id`` alone when the
    client is to resume elsewhere (``Cursor.token``): its Last-Event-ID, should the stream
    end there, then says which events below its last one it has, so the reconnect's replay
    sends one committed after that last frame (two writers), which its id alone would skip,
    and not again one above an id sent late."""
    async for frame in frames:
        yield frame
        if "data" in frame and "id" in frame:
            token = cursor.token()
            if token not in (None, frame["id"]):
                yield {"id": token}


async def _live(
    request: Request,
    pool: Any,
    session: tuple[str, str, datetime],
    queue: asyncio.Queue[BusEvent],
    cursor: Cursor,
    reads: Reads,
) -> AsyncIterator[dict[str, Any]]:
    """The stream past its replay (``_stream``), its catch-ups due on the session's shared
    schedule (``catch_up.Reads``) and read with the session's other streams, until it ends:
    its app's stop begins (``STOPPING``, put on the queue by the stop), its session is gone
    (``SESSION_GONE``, or a catch-up that finds none), its client disconnects or falls
    behind (``LAGGED``), the bus listens again (``RELISTENED``), or its key no longer
    reaches the session."""
    tenant, session_id, _ = session
    loop = asyncio.get_running_loop()
    due = reads.due(loop.time(), CATCH_UP_SECONDS)
    live = _Live(request, pool, session, queue)
    live.reads = reads
    stop: StopClock = request.state.stop
    unwatch = stop.on_begin(partial(queue.put_nowait, STOPPING))
    try:
        while not cursor.gone and not await request.is_disconnected():
            try:
                event = await asyncio.wait_for(queue.get(), max(0.0, due - loop.time()))
            except TimeoutError:
                if not _reaches(request, None):  # revoked: ended without the database
                    return
                read = cursor.catch_up(pool, tenant, session_id, shared=(reads, due))
                async for frame in catch_up.kept_open(read):  # which reads the session's agent
                    yield frame
                due = reads.due(loop.time(), CATCH_UP_SECONDS)
                continue
            if event is RELISTENED:  # every stream here ends now: reconnects spread
                again = partial(
                    cursor.catch_up, pool, tenant, session_id, shared=(reads, loop.time())
                )
                async for frame in reconnect.last_frames(cursor, again):
                    yield frame
                return
            if event is SESSION_GONE or event is LAGGED or event is STOPPING:
                return
            queued = live.dequeued()
            async for frame in live.read_first(event, cursor):
                yield frame
            if (
                live.unread
                or cursor.gone
                or (event.id is not None and not cursor.take_live(event.id))
            ):
                continue  # held back, sent already (the read just now among others), or the end
            verdict = await live.judge(queued)
            if verdict is None:  # not judged, so not sent: a persisted event comes
                cursor.hold(event.id)  # with the catch-up once back
                continue
            if not verdict:
                return
            yield _frame(event)
    finally:
        unwatch()


@router.get(
    "/v1/sessions/{session_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "The session's events as server-sent events, replayed from the "
            "one after Last-Event-ID, then the comment ': live', then live (a ': ping' "
            "comment every 15 s); docs/events.md lists each event's fields.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    },
    openapi_extra={"parameters": [LAST_EVENT_ID, LAST_EVENT_ID_QUERY]},
)
async def session_events(
    session_id: SessionIdDep, request: Request, pool: PoolDep, bus: BusDep, tenant: TenantDep
) -> EventSourceResponse:
    after, got = _after(request)
    top = max(got, default=after)
    found = await store.fetch_resume(
        pool,
        tenant=tenant,
        session_id=session_id,
        after_id=top,
        settle_seconds=event_cursor.SETTLE_SECONDS,
    )
    if found is None:
        raise NotFound(f"no session {session_id!r} (for this API key)")
    created_at, last, floor = found
    session = (tenant, session_id, created_at)
    if top > last:
        # an id past every event of the session comes from elsewhere (a restored database,
        # whose sequence went back): the stream starts after the session's last
        after, got = last, frozenset()
    resumed = (after, None, got) if got else (after, floor, got)  # a token: from its mark
    return EventStream(
        _stream(request, pool, bus, session, *resumed),
        sep="\n",
        ping=15,
        send_timeout=SEND_TIMEOUT_SECONDS,
        headers=sse.STREAM_HEADERS,  # the chat stream's: its Cache-Control replaces the default
    )
