"""Azure OpenAI's chat path, ``POST /openai/deployments/{deployment}/chat/completions`` (also
under ``/s/{session_id}/``): where the SDK's ``AzureOpenAI`` client, given the proxy's origin
as its ``azure_endpoint``, sends a chat.

The deployment names the model, as on Azure: it is the body's ``model`` (one the body holds
too is replaced), so the agent, the provider and the window are the ones that model routes
to, and the call goes to that provider as a ``/v1/chat/completions`` call would, at its
``baseUrl`` under its key. The client's query goes along as any chat's does, but for its
``api-version``: the version of this path's API, which the proxy serves, where the provider
is called at its OpenAI path (Azure's v1 API refuses the parameter there; README Decisions).
These are plain Starlette routes, as the chat's own are (``proxy.api.chat``), under the app's
one middleware stack; ``OPENAPI_PATHS`` describes them.
"""

from __future__ import annotations

import copy
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.api.chat import chat, chat_operation
from proxy.api.deps import session_path_id

__all__ = ["OPENAPI_PATHS", "routes"]

PATH = "/openai/deployments/{deployment}/chat/completions"


async def deployment_chat(request: Request) -> Response:
    return await chat(request, None, request.path_params["deployment"])


async def session_deployment_chat(request: Request) -> Response:
    return await chat(request, session_path_id(request), request.path_params["deployment"])


routes = [
    Route(PATH, deployment_chat, methods=["POST"]),
    Route("/s/{session_id}" + PATH, session_deployment_chat, methods=["POST"]),
]


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
        {
            "name": "api-version",
            "in": "query",
            "required": False,
            "description": "Azure's API version; not forwarded (the rest of the query is).",
            "schema": {"type": "string"},
        },
    ]
    return operation


OPENAPI_PATHS: dict[str, Any] = {
    PATH: {"post": _operation(False)},
    "/s/{session_id}" + PATH: {"post": _operation(True)},
}
"""The Azure chat routes' entries in ``/openapi.json``."""
