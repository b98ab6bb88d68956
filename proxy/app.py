"""create_app(settings) and the lifespan that owns every resource.

uvicorn runs ``proxy.app:create_app --factory``; tests call ``create_app`` with their own
settings instead of patching globals; the provider they talk to is a real HTTP server on
loopback (tests/fakes/upstream.py), never a mocked transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.routing import Match
from starlette.types import Receive, Scope, Send

from proxy import __version__
from proxy.api import chat, events, health, sessions
from proxy.bus import EventBus
from proxy.cascade.types import ContextLengthExceeded
from proxy.config import load_config
from proxy.config_watch import ConfigHolder, watch_config
from proxy.errors import ProxyError, error_body, exception_body
from proxy.h1client import H1Client
from proxy.pgembed import start_embedded, tune_embedded
from proxy.services.chat import ChatService
from proxy.services.compaction import DurableSummarizer
from proxy.session_id import InvalidSessionId
from proxy.settings import Settings
from proxy.store.db import DatabaseUnavailable, PoolExhausted, create_pool, run_migrations
from proxy.tokenizers import build_counters
from proxy.upstream import Upstream

__all__ = ["create_app"]

log = logging.getLogger("cascade")


class State(TypedDict):
    pool: asyncpg.Pool
    config: ConfigHolder
    bus: EventBus
    upstream: Upstream
    chat: ChatService
    settings: Settings
    summarizer: DurableSummarizer


def _tune_gc() -> None:
    """Move everything built at start-up out of the collector's way, and collect the young
    generation every 20,000 allocations instead of 700: a request allocates thousands of
    short-lived objects, so the default ran a collection several times per request.
    bench/overhead's tiny c=32 load: proxy CPU per request 1.25 -> 1.17 ms (median of three
    8-second runs each; a small gain, inside one run's noise, consistent across runs)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 100)


def create_app(settings: Settings | None = None) -> CascadeApp:
    settings = settings or Settings()
    # Validate the config before anything starts, so a bad file fails loudly at boot.
    holder = ConfigHolder(load_config(settings.config, os.environ), settings.config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[State]:
        embedded = None
        dsn = settings.database_url
        if not dsn:
            dsn, embedded = start_embedded(settings.data_dir)
            await tune_embedded(dsn)
        await run_migrations(dsn)
        pool = await create_pool(dsn, max_size=settings.pool_max_size)
        client = H1Client()
        bus = EventBus(pool, dsn)
        await bus.start()
        upstream = Upstream(client)
        count, cost = build_counters(settings.tokenizer or None)
        summarizer = DurableSummarizer(pool=pool, upstream=upstream, bus=bus, count=count,
                                       acquire_timeout=settings.pool_timeout_seconds)
        await summarizer.close_interrupted()  # compactions a stop cut short
        chat_service = ChatService(
            pool=pool, upstream=upstream, bus=bus, cost=cost, settings=settings,
            summarizer=summarizer,
        )
        stop = asyncio.Event()
        watcher = None
        if settings.watch_config and settings.config is not None:
            watcher = asyncio.create_task(watch_config(holder, bus.broadcast_local, stop))
        _tune_gc()
        try:
            yield State(pool=pool, config=holder, bus=bus, upstream=upstream,
                        chat=chat_service, settings=settings, summarizer=summarizer)
        finally:
            stop.set()
            if watcher is not None:
                watcher.cancel()
                try:
                    await watcher
                except asyncio.CancelledError:
                    pass
                except Exception:  # the rest of the shutdown must still run
                    log.exception("the config watcher had failed")
            await summarizer.aclose()
            await bus.stop()
            await client.aclose()
            await pool.close()
            if embedded is not None:
                embedded.cleanup()

    app = CascadeApp(title="Cascade", version=__version__, lifespan=lifespan)
    # No 307 to the slash-less path: it is built from the client's Host header, and clients
    # follow it with their Authorization. A trailing slash is an OpenAI-shaped 404.
    app.router.redirect_slashes = False
    app.router.routes.extend(chat.routes)
    for module in (chat, sessions, events, health):
        app.include_router(module.router)
    app.fast = chat.ChatFastPath(on_error=_install_error_handlers(app))
    return app


class CascadeApp(FastAPI):
    """FastAPI, with the chat routes answered before its middleware stack (``ChatFastPath``).

    Every other request, and a chat request's errors (through the same handlers), behave as
    in plain FastAPI.
    """

    fast: chat.ChatFastPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.fast is not None and scope["type"] == "http":
            scope["app"] = self
            if await self.fast.handle(scope, receive, send):
                return
        await super().__call__(scope, receive, send)


def _methods_for(request: Request) -> list[str]:
    """Every method some route takes on this path (a 405's Allow), by asking each route,
    included routers too, whether it would take the request with that method."""
    return [
        method for method in ("DELETE", "GET", "PATCH", "POST", "PUT")
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL
               for route in request.app.router.routes)
    ]


def _install_error_handlers(app: FastAPI) -> chat.ErrorHandler:
    """One place that turns every error into OpenAI's ``{"error": {...}}`` shape."""

    async def domain(request: Request, exc: Exception) -> JSONResponse:
        status, body = exception_body(exc)
        return JSONResponse(body, status)

    async def invalid_id(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(error_body(str(exc), type="invalid_request_error",
                                       code="invalid_session_id"), 400)

    async def http(request: Request, exc: Any) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        headers = getattr(exc, "headers", None)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:  # Starlette's Allow names the first route's methods only
            allow = ", ".join(_methods_for(request))
            headers = {**(headers or {}), "Allow": allow}
            message = f"{request.url.path} does not take {request.method}; use {allow}"
        return JSONResponse(error_body(message, type="invalid_request_error",
                                       code=str(exc.status_code)), exc.status_code, headers)

    async def validation(request: Request, exc: Any) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse(error_body(f"{loc}: {first.get('msg', 'invalid')}",
                                       type="invalid_request_error", param=loc), 400)

    async def no_database(request: Request, exc: Exception) -> JSONResponse:
        log.warning("%s %s: %s", request.method, request.url.path, exc)  # where, for the log
        return JSONResponse(error_body(
            "the proxy's database is unavailable; retry shortly", type="server_error",
            code="database_unavailable"), 503, {"Retry-After": "5"})

    async def busy(request: Request, exc: Exception) -> JSONResponse:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(error_body(str(exc), type="server_error", code="server_busy"), 503,
                            {"Retry-After": "1"})

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(*reversed(exception_body(exc)))

    handlers: dict[type[BaseException], Any] = {
        ProxyError: domain, ContextLengthExceeded: domain, InvalidSessionId: invalid_id,
        HTTPException: http, RequestValidationError: validation,
        DatabaseUnavailable: no_database, PoolExhausted: busy, Exception: unexpected,
    }
    for cls, handler in handlers.items():
        app.add_exception_handler(cls, handler)

    async def handle(request: Request, exc: Exception) -> Response:
        """The same mapping, for the chat fast path (which runs outside FastAPI's)."""
        handler = next(handlers[c] for c in type(exc).__mro__ if c in handlers)
        return await handler(request, exc)  # type: ignore[no-any-return]

    return handle
