"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import JSONResponse

from proxy.api.deps import BusDep, ReadinessDep

__all__ = ["router"]

router = APIRouter()

EVENTS = ("ok", "reconnecting", "catch-up")
"""What ``/readyz`` says of the event bus, as :func:`readyz` tells them apart."""


def _ready_body(status: str, description: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "required": ["status", "database", "events"],
        "properties": {
            "status": {"type": "string", "enum": [status]},
            "database": {
                "type": "string",
                "description": "`ok`, or the failure's class name (never its text)",
            },
            "events": {
                "type": "string",
                "enum": list(EVENTS),
                "description": "`ok`: the event bus listens; `reconnecting`: its listening "
                "connection is being made again; `catch-up`: it LISTENs through a "
                "transaction pooler, which hears nothing, so open streams get stored events "
                "from their catch-up reads alone. Neither of the last two makes a 503.",
            },
        },
    }
    return {"description": description, "content": {"application/json": {"schema": schema}}}


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={
        200: _ready_body("ok", "Ready: the database answers."),
        503: _ready_body("unavailable", "Not ready: the database does not answer."),
    },
)
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
