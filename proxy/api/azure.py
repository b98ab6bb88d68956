"""Azure OpenAI's paths, also under ``/s/{session_id}/``: where the SDK's ``AzureOpenAI``
client, given the proxy's origin as its ``azure_endpoint``, sends a chat
(``POST /openai/deployments/{deployment}/chat/completions``), embeddings
(``POST /openai/deployments/{deployment}/embeddings``) and its model calls
(``GET /openai/models``, ``GET /openai/models/{model}``).

The deployment names the model, as on Azure: it is the body's ``model`` (one the body holds
too is replaced), so the agent, the provider and the window are the ones that model routes
to, and the call goes to that provider as a ``/v1/chat/completions`` call would, at its
``baseUrl`` under its key. The client's query goes along as any chat's does, but for its
``api-version``: the version of this path's API, which the proxy serves, where the provider
is called at its OpenAI path (Azure's v1 API refuses the parameter there; README Decisions).
The chat's are plain Starlette routes, as the chat's own are (``proxy.api.chat``), under the
app's one middleware stack; ``OPENAPI_PATHS`` describes them. The embeddings and models routes
are ``router``'s, served as ``/v1/embeddings`` and ``/v1/models`` are (``chat.passthrough``):
the deployment is the embeddings body's model (one it names is replaced, as the chat's is),
and the ``api-version`` stays back there too.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.api.chat import chat, chat_operation, model_path, passthrough
from proxy.api.deps import ConfigDep, TenantDep, UpstreamDep, session_path_id
from proxy.api.openapi import BODY_ERRORS, EMBEDDINGS_BODY, error_response

__all__ = ["OPENAPI_PATHS", "router", "routes"]

PATH = "/openai/deployments/{deployment}/chat/completions"


async def deployment_chat(request: Request) -> Response:
    return await chat(request, None, request.path_params["deployment"])


async def session_deployment_chat(request: Request) -> Response:
    return await chat(request, session_path_id(request), request.path_params["deployment"])


routes = [
    Route(PATH, deployment_chat, methods=["POST"]),
    Route("/s/{session_id}" + PATH, session_deployment_chat, methods=["POST"]),
]


_API_VERSION: dict[str, Any] = {
    "name": "api-version",
    "in": "query",
    "required": False,
    "description": "Azure's API version; not forwarded (the rest of the query is).",
    "schema": {"type": "string"},
}
"""The query parameter every Azure path takes and keeps back, in ``/openapi.json``."""


def _operation(session: bool) -> dict[str, Any]:
    operation = copy.deepcopy(chat_operation(session))
    operation["operationId"] = "session_" * session + "deployment_chat_completions"
    operation["summary"] = "Chat completion on an Azure deployment path" + (
        " in the session named by the path" if session else ""
    )
    operation["description"] = (
        "Azure OpenAI's chat path (the SDK's AzureOpenAI client): the deployment is the "
        "model, replacing any the body names; otherwise as POST /v1/chat/completions."
    )
    operation["parameters"] = [
        *operation.get("parameters", []),
        {"name": "deployment", "in": "path", "required": True, "schema": {"type": "string"}},
        _API_VERSION,
    ]
    return operation


OPENAPI_PATHS: dict[str, Any] = {
    PATH: {"post": _operation(False)},
    "/s/{session_id}" + PATH: {"post": _operation(True)},
}
"""The Azure chat routes' entries in ``/openapi.json``."""


router = APIRouter()
_EMBEDDINGS = "/openai/deployments/{deployment}/embeddings"


def _embeddings_body() -> dict[str, Any]:
    """``/v1/embeddings``' body, but for its ``model``: the path's deployment is that, so a
    body may leave it out (one it names is replaced), and the ``api-version``."""
    extra = copy.deepcopy(EMBEDDINGS_BODY)
    schema = extra["requestBody"]["content"]["application/json"]["schema"]
    schema["required"] = [name for name in schema["required"] if name != "model"]
    schema["properties"]["model"] = {
        "type": "string",
        "description": "Replaced by the path's deployment, which is the model.",
    }
    return {**extra, "parameters": [_API_VERSION]}


_EMBEDDINGS_BODY = _embeddings_body()
_MODELS_QUERY = {"parameters": [_API_VERSION]}
_BAD_SESSION: dict[int | str, dict[str, Any]] = {
    400: error_response("An invalid session id in X-Session-Id (`code` `invalid_session_id`).")
}


@router.post(_EMBEDDINGS, responses=BODY_ERRORS, openapi_extra=_EMBEDDINGS_BODY)
async def deployment_embeddings(
    deployment: str, request: Request, upstream: UpstreamDep, cfg: ConfigDep, _: TenantDep
) -> Response:
    """Embeddings on an Azure deployment path: the deployment is the model; else as
    ``POST /v1/embeddings``."""
    return await passthrough(
        request, upstream, cfg, "/embeddings", model_in_body=True, azure=True, deployment=deployment
    )


@router.post("/s/{session_id}" + _EMBEDDINGS, responses=BODY_ERRORS, openapi_extra=_EMBEDDINGS_BODY)
async def session_deployment_embeddings(
    session_id: str,
    deployment: str,
    request: Request,
    upstream: UpstreamDep,
    cfg: ConfigDep,
    _: TenantDep,
) -> Response:
    return await passthrough(
        request,
        upstream,
        cfg,
        "/embeddings",
        named=True,
        model_in_body=True,
        azure=True,
        deployment=deployment,
    )


@router.get("/openai/models", responses=_BAD_SESSION, openapi_extra=_MODELS_QUERY)
async def azure_models(
    request: Request, upstream: UpstreamDep, cfg: ConfigDep, _: TenantDep
) -> Response:
    """The model list on Azure's path (``AzureOpenAI``'s ``models.list``); as ``/v1/models``."""
    return await passthrough(request, upstream, cfg, "/models", azure=True)


@router.get("/s/{session_id}/openai/models", openapi_extra=_MODELS_QUERY)
async def session_azure_models(
    session_id: str, request: Request, upstream: UpstreamDep, cfg: ConfigDep, _: TenantDep
) -> Response:
    return await passthrough(request, upstream, cfg, "/models", named=True, azure=True)


@router.get("/openai/models/{model:model_id}", openapi_extra=_MODELS_QUERY)
async def azure_model(
    model: str, request: Request, upstream: UpstreamDep, cfg: ConfigDep, _: TenantDep
) -> Response:
    """One model on Azure's path (``models.retrieve``); as ``/v1/models/{model}``."""
    return await passthrough(request, upstream, cfg, model_path(model), azure=True)


@router.get("/s/{session_id}/openai/models/{model:model_id}", openapi_extra=_MODELS_QUERY)
async def session_azure_model(
    session_id: str,
    model: str,
    request: Request,
    upstream: UpstreamDep,
    cfg: ConfigDep,
    _: TenantDep,
) -> Response:
    return await passthrough(request, upstream, cfg, model_path(model), named=True, azure=True)
