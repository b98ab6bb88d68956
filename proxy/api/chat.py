"""POST /v1/chat/completions (also under /s/{session_id}/v1/…), models and embeddings."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from proxy.api.deps import (
    ChatDep,
    ConfigDep,
    SettingsDep,
    TenantDep,
    UpstreamDep,
    read_json_body,
    session_path_id,
)
from proxy.errors import ClientRequestError
from proxy.services.chat import ChatContext, route
from proxy.session_id import resolve_session_id
from proxy.upstream import response_headers

__all__ = ["router"]

router = APIRouter()


def _check_messages(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if messages is None:
        raise ClientRequestError("missing required parameter 'messages'", param="messages")
    if not isinstance(messages, list) or not messages:
        raise ClientRequestError("'messages' must be a non-empty array", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ClientRequestError(
                f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]"
            )


async def _chat(
    request: Request, chat: ChatDep, cfg: ConfigDep, tenant: TenantDep, settings: SettingsDep,
    path_id: str | None,
) -> Response:
    body = await read_json_body(request, settings.max_body_bytes)
    _check_messages(body)
    agent = route(cfg, body).agent
    session_id = resolve_session_id(
        path_id=path_id, header_id=request.headers.get("x-session-id"), body=body,
        tenant=tenant, agent=agent,
    )
    ctx = ChatContext(tenant=tenant, session_id=session_id, headers=request.headers)
    response = await chat.complete(cfg, body, ctx)
    response.headers["X-Session-Id"] = session_id
    return response


@router.post("/v1/chat/completions")
async def chat_completions(
    request: Request, chat: ChatDep, cfg: ConfigDep, tenant: TenantDep, settings: SettingsDep
) -> Response:
    return await _chat(request, chat, cfg, tenant, settings, None)


@router.post("/s/{session_id}/v1/chat/completions")
async def session_chat_completions(
    session_id: str, request: Request, chat: ChatDep, cfg: ConfigDep, tenant: TenantDep,
    settings: SettingsDep,
) -> Response:
    return await _chat(request, chat, cfg, tenant, settings, session_path_id(session_id))


async def _passthrough(request: Request, upstream: UpstreamDep, cfg: ConfigDep,
                       path: str) -> Response:
    provider = cfg.providers[cfg.agent_for(None)[1].provider]
    content = await request.body() if request.method == "POST" else None
    req = upstream.build(provider, request.method, path, client_headers=request.headers,
                         content=content, params=request.query_params)
    resp = await upstream.send(req, stream=False)
    return Response(resp.content, resp.status_code, response_headers(resp))


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
