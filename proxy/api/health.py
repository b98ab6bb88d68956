"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import JSONResponse

from proxy.api.deps import BusDep, ReadinessDep

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(readiness: ReadinessDep, bus: BusDep) -> JSONResponse:
    """Ready when the database answers; 503 otherwise, so a load balancer stops routing here.
    Answered without a proxy key (``proxy.auth.OPEN_PATHS``), so the body says a status and
    the failure's class name, never its text (which names the database's host). The check
    is shared and its answer reused for a second (``proxy.store.readiness``), so callers at
    any rate hold at most one pooled connection. ``events`` says whether the event bus
    listens (``reconnecting`` while its connection is being made again, ``catch-up`` for
    good when it LISTENs through a transaction pooler, ``bus_listen.through_pooler``):
    without it open streams here get persisted events late, through their catch-up, and
    transient ones not at all, yet requests are served, so it does not make the answer a
    503."""
    failure = await readiness.result()
    events = "catch-up" if bus.pooled else "ok" if bus.listening else "reconnecting"
    if failure is not None:
        return JSONResponse({"status": "unavailable", "database": failure, "events": events}, 503)
    return JSONResponse({"status": "ok", "database": "ok", "events": events})
