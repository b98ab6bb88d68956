"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import JSONResponse

from proxy.api.deps import PoolDep

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(pool: PoolDep) -> JSONResponse:
    """Ready when the database answers; 503 otherwise, so a load balancer stops routing here.
    Answered without a proxy key (``proxy.auth.OPEN_PATHS``), so the body says a status and
    the failure's class name, never its text (which names the database's host)."""
    try:  # a pool with no connection free for 2 s cannot serve either
        async with pool.acquire(timeout=2) as conn:
            await conn.fetchval("SELECT 1", timeout=2)
    except Exception as exc:
        return JSONResponse({"status": "unavailable", "database": type(exc).__name__}, 503)
    return JSONResponse({"status": "ok", "database": "ok"})
