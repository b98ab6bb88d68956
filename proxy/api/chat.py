"""POST /v1/chat/completions (also under /s/{session_id}/v1/…), models (the list and one
model) and embeddings.

The two chat routes are plain Starlette endpoints (``routes``), not FastAPI path operations:
they take the request and nothing else, so FastAPI's per-request dependency solving is
skipped. They sit in the app's router like any route, under its one middleware stack, and
``OPENAPI_PATHS`` describes them for ``/openapi.json``, which FastAPI builds from its own
path operations only.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.responses import Response
from starlette.routing import Route

from proxy import answers
from proxy.api.chat_body import COUNTS, check_body
from proxy.api.deps import (
    MAX_BODY_BYTES,
    ConfigDep,
    TenantDep,
    UpstreamDep,
    bounded_values,
    json_object,
    reach_session,
    read_body,
    read_json_body,
    session_path_id,
    tenant_of,
    upstream_headers,
    upstream_query,
)
from proxy.api.openapi import BODY_ERRORS, EMBEDDINGS_BODY, RELAYED_ERROR_SCHEMA
from proxy.auth import check_agent, key_agents, key_in_force
from proxy.jsonio import dumps
from proxy.observe import note_usage
from proxy.provider_errors import log_relayed
from proxy.provider_refusal import relayed
from proxy.requestlog import note_session
from proxy.services.chat import ChatContext, route
from proxy.services.client_watch import ClientWatch
from proxy.services.prep_wait import Prepared, PrepWait
from proxy.session_id import derive_session_id, named_session_id
from proxy.upstream import response_headers

__all__ = [
    "chat",
    "chat_operation",
    "model_path",
    "passthrough",
    "router",
    "routes",
    "OPENAPI_PATHS",
]

router = APIRouter()
AZURE_VERSION = "api-version"
"""The query parameter of Azure's deployment paths' API version, which ``AzureOpenAI`` sends."""


async def chat(request: Request, path_id: str | None, deployment: str | None = None) -> Response:
    """A chat completion, on the session ``path_id`` names if any; ``deployment`` (an Azure
    deployment path's name, ``proxy.api.azure``) is the body's model, as Azure reads it."""
    state = request.state
    cfg = state.config.current
    tenant = tenant_of(request, cfg)
    header_id = request.headers.get("x-session-id")
    named = path_id or header_id
    # A session named in the path or the header is known before the body is read: an error
    # answer to the body (malformed, too large, a wrong field) names it in X-Session-Id too.
    early_id = named_session_id(path_id=path_id, header_id=header_id, body=None)
    if early_id is not None:
        note_session(early_id)
    key = (tenant, named) if named else None
    body = await read_json_body(
        request,
        state.settings.max_body_bytes,
        resent=state.chat.bodies,
        key=key,
        setting=MAX_BODY_BYTES,
        values=state.settings.max_body_values,
    )
    check_body(body, state.chat.bodies.checked(key, body))
    state.chat.bodies.mark_checked(key, body)
    if deployment is not None:  # a new top-level dict: the parsed one stays the cache's
        body = {**body, "model": deployment}
    rt = route(cfg, body)
    check_agent(request.scope, rt.agent)
    named_id = early_id or named_session_id(path_id=None, header_id=None, body=body)
    session_id = named_id or derive_session_id(body=body, tenant=tenant, agent=rt.agent)
    note_session(session_id)  # logged, and in X-Session-Id, an error response's too
    await reach_session(request, state.waiting_pool, tenant, session_id)
    every = state.settings.keepalive_seconds
    # As /v1/models and /v1/embeddings forward it (e.g. a gateway's api-version), but for the
    # api-version of Azure's path, which the proxy serves itself (README Decisions).
    query = tuple(upstream_query(request, cfg)) if request.scope["query_string"] else ()
    if deployment is not None:
        query = tuple(p for p in query if p[0] != AZURE_VERSION)

    async def answer(clock: PrepWait | None) -> Response:
        # Watched only while the request waits (client_watch.py), never once the response runs.
        with ClientWatch(request.receive) as client:
            ctx = ChatContext(
                tenant=tenant,
                session_id=session_id,
                headers=upstream_headers(request, cfg),
                derived=named_id is None,
                client=client,
                query=query,
                agents=key_agents(request.scope),
                keepalive=clock,
                admit=lambda: key_in_force(request.scope, state.config.current),
            )
            response: Response = await state.chat.complete(cfg, rt, body, ctx)
            return response

    # A stream's keep-alives start now, whatever it waits for: it is answered as it is sent.
    return Prepared(answer, every) if body.get("stream") else await answer(None)


async def chat_completions(request: Request) -> Response:
    return await chat(request, None)


async def session_chat_completions(request: Request) -> Response:
    return await chat(request, session_path_id(request))


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/s/{session_id}/v1/chat/completions", session_chat_completions, methods=["POST"]),
]


def chat_operation(session: bool) -> dict[str, Any]:
    message = {
        "type": "object",
        "required": ["role"],
        "additionalProperties": True,
        "properties": {"role": {"type": "string"}, "tool_call_id": {"type": "string"}},
    }
    body = {
        "type": "object",
        "required": ["messages"],
        "additionalProperties": True,
        "properties": {
            "model": {"type": "string"},
            "stream": {"type": "boolean"},
            "messages": {"type": "array", "minItems": 1, "items": message},
            "tools": {"type": "array", "items": {"type": "object"}},
            "stream_options": {
                "type": "object",
                "properties": {"include_usage": {"type": "boolean"}},
            },
            # refused below 1 (check_body); n's most is OpenAI's, which the provider judges
            **{name: {"type": ["integer", "null"], "minimum": 1} for name in COUNTS},
            "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 128},
        },
    }
    operation: dict[str, Any] = {
        "summary": "Chat completion" + (" in the session named by the path" if session else ""),
        "description": "OpenAI's chat completions, with the session's context managed; the "
        "session is the path's, else X-Session-Id, else derived.",
        "operationId": "session_chat_completions" if session else "chat_completions",
        "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
        "responses": {
            "200": {
                "description": "The provider's completion, or its stream when stream is true.",
                "headers": {"X-Session-Id": {"schema": {"type": "string"}}},
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            },
            "default": {
                "description": "An OpenAI-shaped error.",
                "content": {"application/json": {"schema": RELAYED_ERROR_SCHEMA}},
            },
        },
    }
    if session:
        operation["parameters"] = [
            {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}},
        ]
    return operation


OPENAPI_PATHS: dict[str, Any] = {
    "/v1/chat/completions": {"post": chat_operation(False)},
    "/s/{session_id}/v1/chat/completions": {"post": chat_operation(True)},
}
"""The chat routes' entries in ``/openapi.json`` (``routes`` are invisible to FastAPI)."""


def _body_model(body: dict[str, Any]) -> str | None:
    """The body's ``model``, to name the provider call's span and metrics; None when it
    names none (the body still goes to the provider as it came)."""
    model = body.get("model")
    return model if isinstance(model, str) and model else None


_EMBEDDINGS_HINT = "ask for fewer inputs, or for encoding_format base64"
_MODELS_HINT = "check the provider's baseUrl"


async def passthrough(
    request: Request,
    upstream: UpstreamDep,
    cfg: ConfigDep,
    path: str,
    named: bool = False,
    *,
    model_in_body: bool = False,
    azure: bool = False,
    deployment: str | None = None,
) -> Response:
    """A call passed to the provider as it came. ``azure``: one of Azure's paths
    (``proxy.api.azure``), whose ``api-version`` stays back as a chat's does there, and whose
    ``deployment`` is an embeddings body's model, as the chat's is."""
    # The path's id (under /s/{session_id}/), else X-Session-Id, read as a chat reads them:
    # a malformed one is the 400, before any provider call; a valid one is named back. A key
    # limited to some agents names only their sessions (or a free id), as on every route
    # that names one: the answer, the access line and the trace put the call in it.
    path_id = session_path_id(request) if named else None
    named_id = named_session_id(
        path_id=path_id, header_id=request.headers.get("x-session-id"), body=None
    )
    if named_id is not None:
        note_session(named_id)
    agent_name, agent = cfg.agent_for(None)
    check_agent(request.scope, agent_name)
    if named_id is not None:
        await reach_session(request, request.state.waiting_pool, tenant_of(request, cfg), named_id)
    provider = cfg.providers[agent.provider]
    content = None
    model = None
    if request.method == "POST":
        settings = request.state.settings
        content = await read_body(request, settings.max_body_bytes, setting=MAX_BODY_BYTES)
        # Its values counted before it is parsed, as a chat body's are (tiny items' cost).
        bounded_values(content, settings.max_body_values)
        # Checked here, sent as it came: a provider that cannot parse a body answers what it
        # likes (an HTML page, a 500), not an error the client can read as its own.
        body = json_object(content)
        if deployment is not None and body.get("model") != deployment:
            body = {**body, "model": deployment}
            content = dumps(body)
        model = _body_model(body) if model_in_body else None
    # A model list near the chat's cap is no provider's; an embeddings batch can pass it.
    if model_in_body:
        cap, hint = answers.MAX_EMBEDDINGS_BYTES, _EMBEDDINGS_HINT
    else:
        cap, hint = answers.MAX_ANSWER_BYTES, _MODELS_HINT
    query = upstream_query(request, cfg)
    if azure:
        query = [p for p in query if p[0] != AZURE_VERSION]
    resp = await upstream.call(
        provider,
        request.method,
        path,
        client_headers=upstream_headers(request, cfg),
        content=content,
        params=query,
        model=model,
        max_bytes=cap,
        over_hint=hint,
    )
    if resp.status_code >= 400:
        log_relayed(provider, resp.status_code, request=resp.request)
    elif model_in_body:  # an embeddings call: its tokens, as the provider reports them
        note_usage(model or "", resp.usage(), "embeddings")
    content, headers = relayed(provider, resp, resp.content, response_headers(resp))
    return Response(content, resp.status_code, headers)


@router.get("/v1/models")
async def models(request: Request, upstream: UpstreamDep, cfg: ConfigDep, _: TenantDep) -> Response:
    return await passthrough(request, upstream, cfg, "/models")


@router.get("/s/{session_id}/v1/models")
async def session_models(
    session_id: str, request: Request, upstream: UpstreamDep, cfg: ConfigDep, _: TenantDep
) -> Response:
    return await passthrough(request, upstream, cfg, "/models", named=True)


class _ModelId(PathConvertor):
    """A model id: a path of at least one character (some ids hold a ``/``). Starlette's
    ``path`` also matches nothing, which made ``/v1/models/`` (a trailing slash, no id) this
    route's; it is no route, as OpenAI answers it with an error rather than the list: the 404
    of an unknown path, counted and traced under no route's template. Nor is an id with a
    ``.`` or ``..`` segment (sent as is or percent-encoded): in the provider's URL it would
    climb out of ``/models/`` to any path of the provider's host, with the proxy's own key
    (``/v1/models/../files``), and ``/v1/files`` is no route of the proxy's either. A segment
    ends at a ``\\`` too (Windows servers read one as a ``/``), and a dot segment may carry
    ``;`` parameters, which Java servers strip before resolving it (``..;``): the aiohttp
    transport sends an encoded ``;`` decoded, so no encoding keeps those in the segment."""

    regex = r"(?!(?:[^/\\]*[/\\])*\.\.?(?:[;/\\]|$)).+"


register_url_convertor("model_id", _ModelId())


def model_path(model: str) -> str:
    """The provider's path of one model."""
    return "/models/" + quote(model, safe="/:@")


@router.get("/v1/models/{model:model_id}")
async def model(
    model: str, request: Request, upstream: UpstreamDep, cfg: ConfigDep, _: TenantDep
) -> Response:
    """One model (the SDKs' ``models.retrieve``); ``path``: some ids hold a ``/``."""
    return await passthrough(request, upstream, cfg, model_path(model))


@router.get("/s/{session_id}/v1/models/{model:model_id}")
async def session_model(
    session_id: str,
    model: str,
    request: Request,
    upstream: UpstreamDep,
    cfg: ConfigDep,
    _: TenantDep,
) -> Response:
    return await passthrough(request, upstream, cfg, model_path(model), named=True)


@router.post("/v1/embeddings", responses=BODY_ERRORS, openapi_extra=EMBEDDINGS_BODY)
async def embeddings(
    request: Request, upstream: UpstreamDep, cfg: ConfigDep, _: TenantDep
) -> Response:
    return await passthrough(request, upstream, cfg, "/embeddings", model_in_body=True)


@router.post("/s/{session_id}/v1/embeddings", responses=BODY_ERRORS, openapi_extra=EMBEDDINGS_BODY)
async def session_embeddings(
    session_id: str, request: Request, upstream: UpstreamDep, cfg: ConfigDep, _: TenantDep
) -> Response:
    return await passthrough(request, upstream, cfg, "/embeddings", named=True, model_in_body=True)
