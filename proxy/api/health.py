"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import JSONResponse

from proxy.api.deps import ReadinessDep

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(readiness: ReadinessDep) -> JSONResponse:
    """Ready when the database answers; 503 otherwise, so a load balancer stops routing here.
    Answered without a proxy key (``proxy.auth.OPEN_PATHS``), so the body says a status and
    the failure's class name, never its text (which names the database's host). The check
    is shared and its answer reused for a second (``proxy.store.readiness``), so callers at
    any rate hold at most one pooled connection."""
    failure = await readiness.result()
    if failure is not None:
        return JSONResponse({"status": "unavailable", "database": failure}, 503)
    return JSONResponse({"status": "ok", "database": "ok"})
