"""GET /v1/sessions/{id}/events: the per-session SSE stream, with Last-Event-ID replay."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from proxy.api.deps import BIGINT_MAX, BusDep, PoolDep, TenantDep
from proxy.bus import BusEvent, EventBus
from proxy.errors import ClientRequestError, NotFound
from proxy.session_id import validate_session_id
from proxy.store import events as store, sessions

__all__ = ["router"]

router = APIRouter()


def _frame(event: BusEvent) -> dict[str, Any]:
    frame = {"event": event.name, "data": json.dumps(event.data)}
    if event.id is not None:
        frame["id"] = str(event.id)
    return frame


CATCH_UP_SECONDS = 2.0
"""How often an open stream also reads the table for events it was not told about."""


async def _stream(
    request: Request, pool: Any, bus: EventBus, tenant: str, session_id: str, after: int
) -> AsyncIterator[dict[str, Any]]:
    """Subscribe first, then replay, so nothing published in between is missed or doubled.

    Live events come through the bus. Every ``CATCH_UP_SECONDS`` the stream also reads the
    table after the id it had read up to, skipping what it already sent, so an event that was
    never announced (its trigger ran before this stream's registration committed, or the
    listener was reconnecting) still arrives, a little later.
    """
    async with bus.subscribe(tenant, session_id) as queue:
        mark = after  # every stored event up to here has been read from the table
        sent: set[int] = set()  # ids above ``mark`` already sent live

        async def catch_up() -> AsyncIterator[dict[str, Any]]:
            nonlocal mark, sent
            while True:
                rows = await store.fetch_events_after(
                    pool, tenant=tenant, session_id=session_id, after_id=mark
                )
                for r in rows:
                    mark = r["id"]
                    if r["id"] not in sent:
                        yield _frame(BusEvent(r["name"], r["data"], r["id"]))
                if len(rows) < 1000:
                    break
            sent = {i for i in sent if i > mark}

        async for frame in catch_up():
            yield frame
        loop = asyncio.get_running_loop()
        due = loop.time() + CATCH_UP_SECONDS
        while not await request.is_disconnected():
            try:
                event = await asyncio.wait_for(queue.get(), max(0.0, due - loop.time()))
            except TimeoutError:
                async for frame in catch_up():
                    yield frame
                due = loop.time() + CATCH_UP_SECONDS
                continue
            if event.id is not None:
                if event.id <= mark or event.id in sent:
                    continue
                sent.add(event.id)
            yield _frame(event)


@router.get("/v1/sessions/{session_id}/events")
async def session_events(
    session_id: str, request: Request, pool: PoolDep, bus: BusDep, tenant: TenantDep
) -> EventSourceResponse:
    session_id = validate_session_id(session_id, source="URL path")
    if await sessions.fetchrow_session(pool, tenant=tenant, session_id=session_id) is None:
        raise NotFound(f"no session {session_id!r} (for this API key)")
    header = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    after = int(header) if header and header.isascii() and header.isdigit() else 0
    if after > BIGINT_MAX:
        raise ClientRequestError(f"Last-Event-ID {header[:30]} is past any event id",
                                 param="Last-Event-ID")
    return EventSourceResponse(
        _stream(request, pool, bus, tenant, session_id, after), sep="\n", ping=15
    )
