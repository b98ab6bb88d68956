"""GET /v1/sessions/{id}/events: the per-session SSE stream, with Last-Event-ID replay."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from proxy.api.deps import BusDep, PoolDep, TenantDep
from proxy.bus import BusEvent, EventBus
from proxy.errors import NotFound
from proxy.session_id import validate_session_id
from proxy.store import events as store, sessions

__all__ = ["router"]

router = APIRouter()


def _frame(event: BusEvent) -> dict[str, Any]:
    frame = {"event": event.name, "data": json.dumps(event.data)}
    if event.id is not None:
        frame["id"] = str(event.id)
    return frame


async def _stream(
    request: Request, pool: Any, bus: EventBus, tenant: str, session_id: str, after: int
) -> AsyncIterator[dict[str, Any]]:
    """Subscribe first, then replay, so nothing published in between is missed or doubled."""
    async with bus.subscribe(tenant, session_id) as queue:
        last = after
        while True:
            rows = await store.fetch_events_after(
                pool, tenant=tenant, session_id=session_id, after_id=last
            )
            for r in rows:
                last = r["id"]
                yield _frame(BusEvent(r["name"], r["data"], r["id"]))
            if len(rows) < 1000:
                break
        while not await request.is_disconnected():
            event = await queue.get()
            if event.id is not None and event.id <= last:
                continue
            if event.id is not None:
                last = event.id
            yield _frame(event)


@router.get("/v1/sessions/{session_id}/events")
async def session_events(
    session_id: str, request: Request, pool: PoolDep, bus: BusDep, tenant: TenantDep
) -> EventSourceResponse:
    session_id = validate_session_id(session_id, source="URL path")
    if await sessions.fetchrow_session(pool, tenant=tenant, session_id=session_id) is None:
        raise NotFound(f"no session {session_id!r} (for this API key)")
    header = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    after = int(header) if header and header.isdigit() else 0
    return EventSourceResponse(
        _stream(request, pool, bus, tenant, session_id, after), sep="\n", ping=15
    )
