"""The proxy's own ASGI middleware: ``AccessLog`` (outermost of ours), ``ServerErrors`` and
``HeadAsGet`` (innermost).

``create_app`` installs them with ``add_middleware`` (``wiring.install_middleware``), CORS
(when configured) between them, so every route, the chat routes included, passes through
the same stack as any middleware a deployment adds::

    AccessLog -> Cors -> ProxyAuth -> ServerErrors -> HeadAsGet
        -> exception handlers -> routes

All are pure ASGI (they wrap ``send``; nothing is buffered), so a stream goes out piece by
piece as before.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy import requestlog
from proxy.errors import error_body, exception_body

__all__ = [
    "AccessLog",
    "Cors",
    "HeadAsGet",
    "ServerErrors",
    "allowed_methods",
    "client_method",
    "request_path",
]

access_log = logging.getLogger("cascade.access")
_DONE_TAIL = 24  # the bytes a chunk ending with the [DONE] event ends with, and some spaces
# how a chunk ending with [DONE]'s event ends (a JSON chunk's ends with "}"): the cheap look
# each chunk of a stream gets
_EVENT_ENDS = (b"]\n\n", b"]\r\n\r\n", b"]\r\r")
log = logging.getLogger("cascade")

# A client's X-Request-Id is kept when it is a short token of visible ASCII; anything else
# (too long, spaces, control characters) is replaced, so it cannot distort a log line.
_CLIENT_ID = re.compile(rb"[!-~]{1,128}")
_SHOWN = ("method", "path", "status", "duration_ms")  # in the access line's text already
_ROUTED = ("route", "endpoint", "path_params")  # what routing adds to a request's scope
_HEAD = "cascade.head"  # set in the GET scope ``HeadAsGet`` hands the routes for a HEAD


class Cors(CORSMiddleware):
    """Starlette's CORS, but a preflight it refuses (an origin ``CASCADE_CORS_ORIGINS`` does
    not name, a method no route takes) is OpenAI's JSON error, as every other error the proxy
    makes, not Starlette's plain text: a client reading ``error.message`` is told which. Its
    headers are Starlette's, so the browser is granted nothing more."""

    def preflight_response(self, request_headers: Headers) -> Response:
        resp = super().preflight_response(request_headers)
        if resp.status_code != 400:
            return resp
        refused = bytes(resp.body).decode("utf-8", "replace")
        headers = {
            k: v for k, v in resp.headers.items() if k not in ("content-length", "content-type")
        }
        message = (
            f"{refused}: the proxy answers the origins CASCADE_CORS_ORIGINS names, with the "
            f"methods {', '.join(sorted(self.allow_methods))}"
        )
        body = error_body(message, type="invalid_request_error", code="cors_refused")
        return JSONResponse(body, 400, headers)


def client_method(scope: Scope) -> str:
    """The method the client sent: HEAD for a request ``HeadAsGet`` hands on as GET, so a
    log line or an error message names what was asked."""
    return "HEAD" if scope.get(_HEAD) else str(scope["method"])


def allowed_methods(request: Request) -> list[str]:
    """A 405's Allow: each method some route (an included router's too) takes on this path,
    HEAD asked as GET, which is what ``HeadAsGet`` hands the router for it."""
    return [
        name
        for name in ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")
        if any(
            route.matches({**request.scope, "method": name.replace("HEAD", "GET")})[0] is Match.FULL
            for route in request.app.router.routes
        )
    ]


def request_path(scope: Scope) -> str:
    """The path as the client sent it (still percent-encoded), without the query string,
    which may carry a credential; one over ``PATH_SHOWN`` characters is cut there, naming
    how many more it had: it goes into log lines, which a log pipeline splits past 16 KB."""
    raw: bytes | None = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else str(scope.get("path", ""))
    if len(path) <= PATH_SHOWN:
        return path
    return f"{path[:PATH_SHOWN]}… ({len(path) - PATH_SHOWN} more characters)"


PATH_SHOWN = 2048
"""The most of a request's path its log lines and error messages show."""


def _request_id(scope: Scope) -> str:
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for name, value in headers:
        if name == b"x-request-id" and _CLIENT_ID.fullmatch(value):
            return value.decode("ascii")
    return uuid.uuid4().hex


class AccessLog:
    """Gives each HTTP request an id and writes one access line once it is answered.

    The id is the client's ``X-Request-Id`` when that is a short printable token, else a
    new one; it goes back in the response's ``X-Request-Id`` (a provider's own id, relayed
    by the chat and passthrough routes, moves to ``X-Upstream-Request-Id``). A request that
    noted its session (``requestlog.note_session``) names it in ``X-Session-Id`` too, error
    responses included. The line has the method, path, status, the time until the last
    byte was sent, the time spent on providers (``requestlog.UpstreamTimer``), the session
    id and the request id, and ``client_gone`` when the client left before the last byte.
    A chat stream's last byte, for its client, is its ``[DONE]``: the proxy stores the reply
    before the response's closing (empty) body goes out, and a client that closes as it
    reads ``[DONE]`` had the whole answer, though its disconnect comes first.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = requestlog.RequestRecord(_request_id(scope))
        token = requestlog.begin(record)
        start = time.perf_counter()
        status = 500  # what the server answers if the app raises before it starts a response
        done: float | None = None
        gone = False  # the client left before the last byte went out
        answered = False  # a chat stream's [DONE] went out: the answer is whole

        async def receive_watched() -> Message:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect" and done is None and not answered:
                gone = True
            return message

        async def send_with_ids(message: Message) -> None:
            nonlocal status, done, answered
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": _with_ids(message.get("headers", ()), record)}
            elif message["type"] == "http.response.body":
                if not message.get("more_body"):
                    done = time.perf_counter()
                elif not answered and (body := message.get("body", b"")).endswith(_EVENT_ENDS):
                    answered = _ends_done(body)
            await send(message)

        try:
            await self.app(scope, receive_watched, send_with_ids)
        finally:
            end = done or time.perf_counter()
            fields = {
                "method": scope["method"],
                "path": request_path(scope),
                "status": status,
                "duration_ms": round((end - start) * 1000, 2),
                "upstream_ms": round(record.upstream_seconds * 1000, 2),
                "session_id": record.session_id,
                "request_id": record.request_id,
            }
            if record.session_waited:  # only on the lines of requests that waited
                fields["session_wait_ms"] = round(record.session_waited * 1000, 2)
            if record.content_encoding:  # a compressed body's (decoded, or the 415's)
                fields["content_encoding"] = record.content_encoding
            if gone:  # a stream the user stopped keeps the 200 its answer began with
                fields["client_gone"] = True
            access_log.info(
                "%s %s %d %.2fms",
                fields["method"],
                fields["path"],
                status,
                fields["duration_ms"],
                extra={"fields": fields, "in_text": _SHOWN},
            )
            requestlog.end(token)


def _ends_done(body: bytes) -> bool:
    """Whether ``body`` ends with a ``data: [DONE]`` event, as the proxy writes it or as a
    provider's went out (any spacing, ``\r\n``); a delta whose text is ``[DONE]`` is none."""
    tail = body[-_DONE_TAIL:].rstrip()
    return tail.endswith(b"[DONE]") and tail[:-6].rstrip().endswith(b"data:")


def _with_ids(
    headers: list[tuple[bytes, bytes]] | tuple[()], record: requestlog.RequestRecord
) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    has_session = False
    for name, value in headers:
        lower = name.lower()
        if lower == b"x-request-id":
            name = b"x-upstream-request-id"
        elif lower == b"x-session-id":
            has_session = True
        out.append((name, value))
    out.append((b"x-request-id", record.request_id.encode("ascii")))
    if record.session_id is not None and not has_session:
        out.append((b"x-session-id", record.session_id.encode("latin-1")))
    return out


class ServerErrors:
    """An exception no handler took becomes OpenAI's 500 shape, logged once with its
    traceback, when no response has started; after that it propagates (uvicorn logs it and
    closes the connection, the only way left to tell the client).

    Installed inside CORS and the access line, so the 500 carries CORS headers and is logged
    with its status; Starlette's own last-resort handler sits outside every user middleware.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            if started:
                raise
            log.exception("500: unhandled error on %s %s", scope["method"], request_path(scope))
            status, body = exception_body(exc)
            await JSONResponse(body, status)(scope, receive, send)


class HeadAsGet:
    """HEAD answered as GET would be, with its status and headers and no body.

    FastAPI's ``@router.get`` routes take GET only (a Starlette ``Route`` adds HEAD itself),
    so a load balancer or uptime checker sending HEAD got a 405. The routes see GET, and this
    completes the response as soon as its headers are out: the body is dropped, a stream (an
    event stream) included, whose route then sees the client gone. The server, told HEAD,
    sends no body either. A path with no GET route answers as its GET does: 404, or 405
    with its ``Allow``. Every route, declared either way or added later, is covered. What
    the router leaves in the scope (the route that took the request) is copied back to the
    HEAD's own scope, for the metrics' route label outside.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        done = False
        inner = {**scope, "method": "GET", _HEAD: True}

        async def headers_only(message: Message) -> None:
            nonlocal done
            if done:
                return  # the rest of a body nobody reads
            if message["type"] == "http.response.start":
                scope.update({k: inner[k] for k in _ROUTED if k in inner})
                await send(message)
                done = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app(inner, receive, headers_only)
