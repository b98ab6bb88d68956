"""The stack every route passes through: our middleware, and the exception handlers that give
every error OpenAI's ``{"error": {...}}`` shape.

``create_app`` (``proxy.app``) builds the route table and the lifespan, then hands the app to
these two; keeping them apart from it means the order of the middleware and the mapping of each
exception to its status and body are read, and changed, in one place.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from proxy.api import deps
from proxy.auth import ProxyAuth
from proxy.cascade.types import ContextLengthExceeded
from proxy.config_watch import ConfigHolder
from proxy.db_answers import database_answer
from proxy.errors import ProxyError, error_body, exception_body
from proxy.logs import causes
from proxy.middleware import (
    AccessLog,
    Cors,
    HeadAsGet,
    ServerErrors,
    allowed_methods,
    client_method,
    request_path,
)
from proxy.observe import Observe, Observer
from proxy.refusals import StartupRefusals
from proxy.session_id import InvalidSessionId
from proxy.settings import Settings
from proxy.store.db import DatabaseUnavailable, PoolExhausted

__all__ = ["install_error_handlers", "install_middleware"]

log = logging.getLogger("cascade")


def install_middleware(
    app: FastAPI,
    settings: Settings,
    holder: ConfigHolder,
    require_keys: bool,
    observer: Observer,
) -> None:
    """Ours, innermost first (``add_middleware`` wraps what is there): start-up refusals as one
    line (``proxy.refusals``, the lifespan scope only), HEAD as a bodiless GET, the 500 of last
    resort, the proxy-key gate (``proxy.auth``), CORS when ``CASCADE_CORS_ORIGINS`` names
    origins (a preflight needs no key; a 401 carries CORS headers), metrics and spans
    (``Observe``, so 401s are counted too), and the access line outside them all (its record
    is what ``Observe`` extends)."""
    app.add_middleware(StartupRefusals)
    app.add_middleware(HeadAsGet)
    app.add_middleware(ServerErrors)
    app.add_middleware(
        ProxyAuth,
        holder=holder,
        require_keys=require_keys,
        allow_unauthenticated=settings.allow_unauthenticated,
        cors_origins=settings.cors_origin_list(),
    )
    if origins := settings.cors_origin_list():
        app.add_middleware(
            Cors,
            allow_origins=origins,
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=[
                "X-Session-Id",
                "X-Request-Id",
                "X-Upstream-Request-Id",
                "X-Cascade-Overhead-Ms",
            ],
        )
    app.add_middleware(Observe, observer=observer)
    app.add_middleware(AccessLog)


_AZURE_ROOT = re.compile(r"(?:/s/[^/]+)?/openai/")  # an azure_endpoint's paths, not a model id's
_HTTP_CODES = {404: "unknown_url", 405: "method_not_allowed"}  # told from a missing session
_DEPLOYMENTS = (
    "; of Azure's paths the proxy serves /openai/deployments/<deployment>/chat/completions, "
    "/openai/deployments/<deployment>/embeddings and /openai/models (give AzureOpenAI the "
    "proxy's origin as its azure_endpoint), and no others; under /v1/ it serves OpenAI's "
    "chat completions, models and embeddings (the SDK's OpenAI client)"
)  # not "nor OpenAI's under /v1/": an AzureOpenAI given the /v1 URL would read it as no chat


_DEPLOYMENT_MODELS = re.compile(r"/openai/deployments/[^/]+/models(?:/|$)")
_LISTED_AT = (
    "; Azure lists models at /openai/models, under no deployment (it answers this path 404 "
    "too): give AzureOpenAI the proxy's origin as its azure_endpoint, not a deployment's URL "
    "as its base_url, and it lists them there (GET /openai/models, /openai/models/<model>)"
)  # a client given the old-style deployment URL (``…/openai/deployments/<d>``) calls here


_OPENAI_UNSERVED = re.compile(
    r"(?:/s/[^/]+)?/v1/(?:chat/completions/.|(?:responses|completions|files|uploads|audio"
    r"|images|moderations|batches|assistants|threads|vector_stores|fine_tuning|realtime"
    r"|conversations|evals|containers)(?:/|$))"
)  # OpenAI's other APIs, which the SDK's newer calls (client.responses.create) go to
_SERVED = (
    "; of OpenAI's APIs the proxy serves chat completions (POST /v1/chat/completions), "
    "models (GET /v1/models) and embeddings (POST /v1/embeddings), not this one"
)


_SESSION_ROOT = re.compile(r"^/s/[^/]+(?=/)")  # a session named by the path: its id is any name
_OWN_API = re.compile(r"/v1/(?:sessions|memory)(?:/|$)")  # the proxy's own, no SDK's


def _unserved_hint(path: str) -> str:
    """What a 404's message adds for a path of Azure's (where the SDK's AzureOpenAI puts its
    calls) or of OpenAI's other APIs: the paths the proxy serves instead (for the models
    under a deployment, where Azure lists them). A ``deployments``
    that is an id (a session's, under ``/s/`` or the session API) is no Azure path's."""
    rest = _SESSION_ROOT.sub("", path, count=1)
    if _OWN_API.match(rest):
        return ""
    if _DEPLOYMENT_MODELS.match(rest):
        return _LISTED_AT
    if "/deployments/" in rest or _AZURE_ROOT.match(path):
        return _DEPLOYMENTS
    return _SERVED if _OPENAI_UNSERVED.match(path) else ""


def install_error_handlers(app: FastAPI) -> None:
    """One place that turns every error into OpenAI's ``{"error": {...}}`` shape, and logs it
    once: a client's mistake at INFO with its message, a provider or database failure at
    WARNING with its cause. An exception none of these takes is ``ServerErrors``'s 500."""

    async def domain(request: Request, exc: Exception) -> JSONResponse:
        status, body = exception_body(exc)
        logged = getattr(exc, "log_message", None) or body["error"]["message"]
        _log_error(request, status, exc, logged)
        return JSONResponse(body, status, _domain_headers(status, exc))

    async def invalid_id(request: Request, exc: InvalidSessionId) -> JSONResponse:
        _log_error(request, 400, exc, exc.for_log())  # the client gets the value, not the log
        return JSONResponse(
            error_body(
                str(exc), type="invalid_request_error", param=exc.param, code="invalid_session_id"
            ),
            400,
        )

    async def http(request: Request, exc: Any) -> JSONResponse:
        if exc.status_code == 405 and deps.encoded_slash(request):  # an id with "/": no route
            exc = HTTPException(404)
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        headers, code = getattr(exc, "headers", None), _HTTP_CODES.get(exc.status_code)
        if exc.status_code == 404:  # OpenAI's words for a path it has no route for
            message = f"Invalid URL ({client_method(request.scope)} {request_path(request.scope)})"
            message += _unserved_hint(request.url.path)
        elif exc.status_code == 405:  # Starlette's names one route's; a mount's own is kept
            allow = ", ".join(allowed_methods(request)) or (headers or {}).get("Allow", "")
            headers = {**(headers or {}), "Allow": allow}
            message = (
                f"{request.url.path} does not take {client_method(request.scope)}; use {allow}"
            )
        _log_error(request, exc.status_code, exc, message)
        body = error_body(message, type="invalid_request_error", code=code)
        return JSONResponse(body, exc.status_code, headers)

    async def validation(request: Request, exc: Any) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ())]
        message = f"{'.'.join(loc)}: {first.get('msg', 'invalid')}"
        param = ".".join(loc[1:] if loc[:1] in (["query"], ["path"], ["header"]) else loc)
        _log_error(request, 400, exc, message)  # param: the name the client sent, as OpenAI's
        return JSONResponse(error_body(message, type="invalid_request_error", param=param), 400)

    async def database_failure(request: Request, exc: Exception) -> JSONResponse:
        """An unavailable database or a pool with no connection free (``db_answers``)."""
        answer = database_answer(exc)
        assert answer is not None  # registered for those two only
        status, body, retry = answer
        _log_error(request, status, exc, str(exc))
        return JSONResponse(body, status, {"Retry-After": retry})

    async def last_resort(request: Request, exc: Exception) -> JSONResponse:
        """Starlette's outermost handler, for a failure in a middleware itself: the body in
        our shape; Starlette re-raises, and uvicorn logs the traceback."""
        return JSONResponse(*reversed(exception_body(exc)))

    handlers: dict[type[Exception], Any] = {
        ProxyError: domain,
        ContextLengthExceeded: domain,
        InvalidSessionId: invalid_id,
        HTTPException: http,
        RequestValidationError: validation,
        DatabaseUnavailable: database_failure,
        PoolExhausted: database_failure,
        Exception: last_resort,
    }
    for cls, handler in handlers.items():
        app.add_exception_handler(cls, handler)


def _domain_headers(status: int, exc: Exception) -> dict[str, str] | None:
    """A 401 names its scheme, as the gate's does (``auth.ProxyAuth``), whoever raised it; an
    error that says when to retry (``ServerBusy``'s 503) says it in ``Retry-After``."""
    if retry := getattr(exc, "retry_after", None):
        return {"Retry-After": str(retry)}
    return {"WWW-Authenticate": "Bearer"} if status == 401 else None


def _log_error(request: Request, status: int, exc: BaseException, message: str) -> None:
    """``<status> <method> <path>: <message>``; for a 5xx, the chain of causes behind it (a
    502 names the provider in its message, and the cause says why: refused, DNS, TLS...)."""
    where = f"{client_method(request.scope)} {request_path(request.scope)}"
    if status < 500:
        log.info("%d %s: %s", status, where, message)
    else:
        log.warning("%d %s: %s%s", status, where, message, causes(exc))
