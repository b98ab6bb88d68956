"""The route template a request is counted and traced under (``/v1/models/{model}``), never
its path, which names a session or a model: the label stays one of a few, whatever clients send.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.routing import Match
from starlette.types import Scope

__all__ = ["route_template"]


def route_template(scope: Scope, templates: dict[Any, str]) -> str:
    """The template of the route that took the request (``none`` when none did).

    FastAPI's own routes leave themselves in ``scope["route"]``; a plain Starlette route (the
    chat routes) leaves its ``endpoint``, looked up in ``templates``: endpoint -> path, filled
    from the app's routes on a miss.
    """
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str) and path:
        return _as_written(path)
    endpoint = scope.get("endpoint") or _matched(scope)
    if endpoint is None:
        return "none"
    found = templates.get(endpoint)
    if found is None:
        app = scope.get("app")
        for route in getattr(getattr(app, "router", None), "routes", ()):
            target = getattr(route, "endpoint", None) or getattr(route, "app", None)
            if target is not None and isinstance(getattr(route, "path", None), str):
                templates.setdefault(target, _as_written(route.path or "/"))
        found = templates.setdefault(endpoint, "none")
    return found


def _matched(scope: Scope) -> Any:
    """The endpoint of the route whose path and method ``scope`` matches, for a request the
    router never saw (the proxy-key gate's 401), or None."""
    app = scope.get("app")
    for route in getattr(getattr(app, "router", None), "routes", ()):
        match, child = route.matches(scope)
        if match is Match.FULL:
            return child.get("endpoint")
    return None


_CONVERTER = re.compile(r"\{(\w+):\w+\}")


def _as_written(path: str) -> str:
    """A route's template as its parameters are named (``/v1/models/{model}``), without
    Starlette's converter (``{model:model_id}``), which is how the route is declared, not what a
    dashboard or a trace viewer should show."""
    return _CONVERTER.sub(r"{\1}", path) if ":" in path else path
