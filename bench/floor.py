"""The floor: the least a FastAPI proxy can do, relaying bytes through one shared client.

``python -m bench.floor --port N --upstream URL [--client NAME]`` (names below)

Every request is forwarded to ``URL + path`` with its body and its ``content-type`` /
``authorization`` headers. An ``text/event-stream`` answer is relayed chunk by chunk
(``client.send(stream=True)`` + ``StreamingResponse``, closed by a background task, STYLE E2);
anything else is read whole and returned. Nothing is parsed, so whatever a real proxy costs on
top of this is its own work.

Clients, to find what the numbers say about httpx's pool under concurrency:

- ``httpx``: ``httpx.AsyncClient`` with keep-alive sized to the pool (no reconnect churn).
- ``httpx-default``: ``httpx.AsyncClient()`` with default ``Limits`` (20 keep-alive connections).
- ``httpx-aiohttp``: the httpx API over ``httpx_aiohttp.AiohttpTransport`` (aiohttp's pool).
- ``httpx2``: pydantic's maintained httpx fork (``httpx2``/``httpcore2``), same API.
- ``aiohttp``: a plain ``aiohttp.ClientSession``; the ceiling for a Python asyncio relay.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

__all__ = ["CLIENTS", "create_app", "main"]

CLIENTS = ("httpx", "httpx-default", "httpx-aiohttp", "httpx2", "aiohttp")
_FORWARD = ("content-type", "authorization", "accept")
_POOL = 512


def _forward_headers(request: Request) -> dict[str, str]:
    return {k: v for k in _FORWARD if (v := request.headers.get(k)) is not None}


def _httpx_client(kind: str) -> Any:
    import httpx

    if kind == "httpx2":
        import httpx2

        return httpx2.AsyncClient(
            timeout=httpx2.Timeout(600.0, connect=10.0),
            limits=httpx2.Limits(max_connections=_POOL, max_keepalive_connections=_POOL),
        )
    timeout = httpx.Timeout(600.0, connect=10.0)
    if kind == "httpx-default":
        return httpx.AsyncClient(timeout=timeout)
    limits = httpx.Limits(max_connections=_POOL, max_keepalive_connections=_POOL)
    if kind == "httpx":
        return httpx.AsyncClient(timeout=timeout, limits=limits)
    from httpx_aiohttp import AiohttpTransport

    return httpx.AsyncClient(timeout=timeout, transport=AiohttpTransport(limits=limits))


def _httpx_app(upstream: str, kind: str) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with _httpx_client(kind) as client:
            app.state.client = client
            yield

    app = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def relay(path: str, request: Request) -> Response:
        client = request.app.state.client
        upstream_request = client.build_request(
            request.method,
            f"{upstream}/{path}",
            content=await request.body(),
            headers=_forward_headers(request),
        )
        resp = await client.send(upstream_request, stream=True)
        media = resp.headers.get("content-type", "application/json")
        if media.startswith("text/event-stream"):
            return StreamingResponse(
                resp.aiter_raw(),
                status_code=resp.status_code,
                media_type=media,
                background=BackgroundTask(resp.aclose),
            )
        try:
            content = await resp.aread()
        finally:
            await resp.aclose()
        return Response(content, status_code=resp.status_code, media_type=media)

    return app


def _aiohttp_app(upstream: str) -> FastAPI:
    import aiohttp

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=_POOL)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            app.state.session = session
            yield

    app = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def relay(path: str, request: Request) -> Response:
        session: aiohttp.ClientSession = request.app.state.session
        resp = await session.request(
            request.method,
            f"{upstream}/{path}",
            data=await request.body(),
            headers=_forward_headers(request),
        )
        media = resp.headers.get("content-type", "application/json")
        if media.startswith("text/event-stream"):

            async def chunks() -> AsyncIterator[bytes]:
                async for chunk in resp.content.iter_any():
                    yield chunk

            return StreamingResponse(
                chunks(),
                status_code=resp.status,
                media_type=media,
                background=BackgroundTask(resp.release),
            )
        try:
            content = await resp.read()
        finally:
            resp.release()
        return Response(content, status_code=resp.status, media_type=media)

    return app


def create_app(upstream: str, client: str = "httpx") -> FastAPI:
    """The pass-through app for ``upstream`` (no trailing slash) using the named client."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")
    upstream = upstream.rstrip("/")
    return _aiohttp_app(upstream) if client == "aiohttp" else _httpx_app(upstream, client)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:9000")
    parser.add_argument("--client", choices=CLIENTS, default="httpx")
    args = parser.parse_args(argv)
    uvicorn.run(
        create_app(args.upstream, args.client),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
