"""The web console at ``/ui``: static HTML, CSS and ES modules shipped in the package.

No build step and no CDN: the files under ``static/`` are served as they are, and the page
loads nothing from any other host (its Content-Security-Policy says so to the browser too).
The shell holds no data, so the key gate (``proxy.auth``) lets GET/HEAD under ``/ui``
through; every call the page makes carries the key it asks for once (kept in the tab's
session storage, sent in the Authorization header, never in a URL).
"""

from __future__ import annotations

import functools
import html
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

__all__ = ["routes", "STATIC_DIR", "CSP"]

STATIC_DIR = Path(__file__).resolve().parent / "static"

CSP = (
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
"""Only the proxy itself: no script, style, image or request goes anywhere else."""

_HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


async def index(request: Request) -> Response:
    """The one page; the views (list, session) are the fragment's, so any path under it
    serves the same shell. Behind a prefix (uvicorn's ``--root-path``, a front server that
    strips it) its stylesheet and modules are named under the prefix, where the browser
    finds them; the modules call the API under the path they were loaded from."""
    root = html.escape(request.scope.get("root_path", "").rstrip("/"), quote=True)
    page = _shell().replace('"/ui/static/', f'"{root}/ui/static/')
    return HTMLResponse(page, headers=_HEADERS)


@functools.cache
def _shell() -> str:
    return (STATIC_DIR / "index.html").read_text(encoding="utf-8")


class _Static(StaticFiles):
    """The modules and the stylesheet, with the page's headers."""

    def file_response(self, *args: object, **kwargs: object) -> Response:
        response = super().file_response(*args, **kwargs)  # type: ignore[arg-type]
        response.headers.update(_HEADERS)
        return response


routes: list[BaseRoute] = [
    Route("/ui", index, methods=["GET", "HEAD"]),
    Route("/ui/", index, methods=["GET", "HEAD"]),
    Mount("/ui/static", app=_Static(directory=STATIC_DIR), name="ui-static"),
]
