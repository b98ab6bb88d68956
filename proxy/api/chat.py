"""POST /v1/chat/completions (also under /s/{session_id}/v1/…), models and embeddings.

The two chat routes are plain Starlette endpoints (``routes``), not FastAPI path operations:
they take the request and nothing else, so FastAPI's per-request dependency solving (about a
fifth of the proxy's CPU on a tiny request in bench/overhead's profile) is skipped. And
``ChatFastPath`` hands a POST to them before the app's middleware stack (``proxy.app``),
past the router (which tries every route in turn), FastAPI's exit stack, exception,
telemetry and body-limit middleware and Starlette's error middleware (about 4% of the proxy's
CPU per tiny request, measured twice each way); it maps errors with the app's own handlers,
so they keep the OpenAI shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from proxy.api.deps import (
    ConfigDep,
    TenantDep,
    UpstreamDep,
    read_body,
    read_json_body,
    session_path_id,
    tenant_of,
    upstream_headers,
)
from proxy.errors import ClientRequestError
from proxy.services.chat import ChatContext, route
from proxy.session_id import resolve_session_id
from proxy.upstream import response_headers

__all__ = ["router", "routes", "ChatFastPath", "ErrorHandler"]

ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]

router = APIRouter()


# Fields the proxy reads or extends before forwarding: a wrong type is the client's error
# (400 naming it), never a 500, and is caught before the session is locked.
_TYPED = (("model", str, "a string"), ("stream_options", dict, "an object"),
          ("tools", list, "an array"))


def _check_body(body: dict[str, Any]) -> None:
    for name, kind, what in _TYPED:
        value = body.get(name)
        if value is not None and not isinstance(value, kind):
            raise ClientRequestError(f"'{name}' must be {what}", param=name)
    _check_messages(body)


_ID_TYPES = (str, type(None))  # a tool_call_id, or none (absent, or null as some SDKs send)


def _check_messages(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if messages is None:
        raise ClientRequestError("missing required parameter 'messages'", param="messages")
    if not isinstance(messages, list) or not messages:
        raise ClientRequestError("'messages' must be a non-empty array", param="messages")
    if all(type(m) is dict and type(m.get("role")) is str
           and type(m.get("tool_call_id", "")) in _ID_TYPES for m in messages):
        return  # the common case, in one pass (a 5,000-message history is resent each time)
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ClientRequestError(
                f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]"
            )
        if type(m.get("tool_call_id", "")) not in _ID_TYPES:
            raise ClientRequestError(f"messages[{i}].tool_call_id must be a string",
                                     param=f"messages[{i}].tool_call_id")


async def _chat(request: Request, path_id: str | None) -> Response:
    state = request.state
    cfg = state.config.current
    tenant = tenant_of(request, cfg)
    header_id = request.headers.get("x-session-id")
    named = path_id or header_id
    body = await read_json_body(
        request, state.settings.max_body_bytes, resent=state.chat.bodies,
        key=(tenant, named) if named else None,
    )
    _check_body(body)
    rt = route(cfg, body)
    session_id = resolve_session_id(
        path_id=path_id, header_id=header_id, body=body,
        tenant=tenant, agent=rt.agent,
    )
    request.state.session_id = session_id  # for an error response too (ChatFastPath)
    ctx = ChatContext(tenant=tenant, session_id=session_id,
                      headers=upstream_headers(request, cfg))
    response = await state.chat.complete(cfg, rt, body, ctx)
    response.headers["X-Session-Id"] = session_id
    return response


async def chat_completions(request: Request) -> Response:
    return await _chat(request, None)


async def session_chat_completions(request: Request) -> Response:
    return await _chat(request, session_path_id(request.path_params["session_id"]))


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/s/{session_id}/v1/chat/completions", session_chat_completions, methods=["POST"]),
]


class ChatFastPath:
    """Answers a request one of ``routes`` matches fully (``handle`` returns True); anything
    else (other paths, other methods) is left to the app (False)."""

    def __init__(self, *, on_error: ErrorHandler) -> None:
        self.on_error = on_error

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> bool:
        for candidate in routes:
            match, child = candidate.matches(scope)
            if match is Match.FULL:
                scope = {**scope, **child}  # path_params, as the router would set them
                request = Request(scope, receive, send)
                try:
                    response = await candidate.endpoint(request)
                except Exception as exc:
                    response = await self.on_error(request, exc)
                    if session_id := getattr(request.state, "session_id", None):
                        response.headers["X-Session-Id"] = session_id
                await response(scope, receive, send)
                return True
        return False


async def _passthrough(request: Request, upstream: UpstreamDep, cfg: ConfigDep,
                       path: str) -> Response:
    named = request.path_params.get("session_id")
    session_id = session_path_id(named) if named is not None else None  # 400 when invalid
    provider = cfg.providers[cfg.agent_for(None)[1].provider]
    content = (await read_body(request, request.state.settings.max_body_bytes)
               if request.method == "POST" else None)
    resp = await upstream.call(provider, request.method, path,
                               client_headers=upstream_headers(request, cfg), content=content,
                               params=list(request.query_params.multi_items()))
    headers = response_headers(resp)
    if session_id is not None:
        headers["X-Session-Id"] = session_id
    return Response(resp.content, resp.status_code, headers)


@router.get("/v1/models")
@router.get("/s/{session_id}/v1/models")
async def models(request: Request, upstream: UpstreamDep, cfg: ConfigDep,
                 _: TenantDep) -> Response:
    return await _passthrough(request, upstream, cfg, "/models")


@router.post("/v1/embeddings")
@router.post("/s/{session_id}/v1/embeddings")
async def embeddings(request: Request, upstream: UpstreamDep, cfg: ConfigDep,
                     _: TenantDep) -> Response:
    return await _passthrough(request, upstream, cfg, "/embeddings")
