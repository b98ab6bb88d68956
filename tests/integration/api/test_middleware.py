"""The app's one middleware stack: every route in it, the 500 of last resort, CORS, OpenAPI.

A canary middleware added the way a deployment adds one (``app.add_middleware``) must see
every route the app has, the chat routes streamed and not included: the routes are read from
``app.routes``, so a route added later is covered without touching this file.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
from fastapi.routing import iter_route_contexts
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.settings import Settings
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records

ORIGIN = "https://app.example"
CHAT_PATHS = {
    "/v1/chat/completions",
    "/s/{session_id}/v1/chat/completions",
    "/openai/deployments/{deployment}/chat/completions",  # Azure's (``proxy.api.azure``)
    "/s/{session_id}/openai/deployments/{deployment}/chat/completions",
}


class Canary:
    """Records every HTTP request it sees and marks every response it passes."""

    def __init__(self, app: ASGIApp, seen: list[tuple[str, str]]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.seen.append((scope["method"], scope["path"]))

        async def mark(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message["headers"], (b"x-canary", b"1")]}
            await send(message)

        await self.app(scope, receive, mark)


def _start(settings: Settings, **overrides: Any) -> tuple[ProxyServer, list[tuple[str, str]]]:
    server = ProxyServer(settings.model_copy(update=overrides))
    seen: list[tuple[str, str]] = []
    server.app.add_middleware(Canary, seen=seen)
    return server, seen


def _requests(app: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """One request per route and method, path parameters filled; the chat routes twice
    (stream and not). ``iter_route_contexts`` flattens FastAPI's included routers."""
    out = []
    for route in iter_route_contexts(app.routes):
        path = re.sub(r"\{[^}]+\}", "canary-1", route.path)
        for method in sorted((getattr(route, "methods", None) or set()) - {"HEAD"}):
            if route.path in CHAT_PATHS:
                for stream in (False, True):
                    body = {
                        "model": "gpt-fake",
                        "stream": stream,
                        "messages": [{"role": "user", "content": "hi"}],
                    }
                    out.append((method, path, {"json": body}))
            elif method == "POST":
                out.append((method, path, {"json": {}}))
            else:
                out.append((method, path, {}))
    return out


def test_every_route_chat_included_passes_through_an_added_middleware(
    settings: Settings, fake_upstream: FakeUpstream
) -> None:
    server, seen = _start(settings)
    server.start()
    try:
        requests = _requests(server.app)
        chats = [r for r in requests if r[1].endswith("/chat/completions")]
        assert len(chats) == 8  # the four chat routes, each streamed and not
        fake_upstream.script(*[reply("canary", chunks=1)] * len(chats))
        with httpx.Client(
            base_url=server.origin, timeout=10, headers={"authorization": "Bearer sk-test"}
        ) as http:
            for method, path, kwargs in requests:
                resp = http.request(method, path, **kwargs)
                assert resp.headers.get("x-canary") == "1", (method, path, resp.status_code)
                assert (method, path) in seen, (method, path)
                if path.endswith("/chat/completions"):
                    assert resp.status_code == 200 and "canary" in resp.text, resp.text
    finally:
        server.stop()


class _Broken(Response):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("broke while sending")


def test_an_exception_while_sending_a_response_is_an_openai_500_logged_once(
    settings: Settings, records: Records
) -> None:
    server, seen = _start(settings, cors_origins=ORIGIN)
    server.app.router.routes.append(Route("/broken", lambda request: _Broken()))
    server.start()
    try:
        resp = httpx.get(f"{server.origin}/broken", headers={"origin": ORIGIN}, timeout=10)
    finally:
        server.stop()
    assert resp.status_code == 500
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "server_error"
    assert "broke while sending" not in error["message"]  # details stay in the log
    assert resp.headers["access-control-allow-origin"] == ORIGIN  # inside CORS
    assert resp.headers["x-canary"] == "1" and resp.headers["x-request-id"]
    tracebacks = [r for r in records.records if r.exc_info]
    assert len(tracebacks) == 1, [r.getMessage() for r in tracebacks]
    assert "RuntimeError" in repr(tracebacks[0].exc_info[1])
    assert tracebacks[0].levelno == logging.ERROR


def _chat(http: httpx.Client, *, stream: bool) -> httpx.Response:
    body = {"model": "gpt-fake", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    return http.post(
        "/v1/chat/completions", json=body, headers={"origin": ORIGIN, "x-session-id": "cors"}
    )


def _preflight(http: httpx.Client) -> httpx.Response:
    return http.options(
        "/v1/chat/completions",
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        },
    )


def test_cors_is_off_by_default(http: httpx.Client, fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("no cors"))
    resp = _chat(http, stream=False)
    assert resp.status_code == 200
    assert not [h for h in resp.headers if h.startswith("access-control-")]
    assert not [h for h in _preflight(http).headers if h.startswith("access-control-")]


def test_cors_origins_setting_covers_the_chat_post_streamed_and_not(
    settings: Settings, fake_upstream: FakeUpstream
) -> None:
    # in upper case: an origin is case-insensitive, and a browser sends it in lower case
    origins = f"{ORIGIN.upper()}, https://b.x"
    server = ProxyServer(settings.model_copy(update={"cors_origins": origins}))
    server.start()
    fake_upstream.script(reply("cors", chunks=1), reply("cors", chunks=1))
    try:
        with httpx.Client(
            base_url=server.origin, timeout=10, headers={"authorization": "Bearer sk-test"}
        ) as http:
            pre = _preflight(http)
            responses = [_chat(http, stream=False), _chat(http, stream=True)]
            other = http.get("/healthz", headers={"origin": "https://evil.example"})
    finally:
        server.stop()
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in pre.headers["access-control-allow-methods"]
    for resp in responses:
        assert resp.status_code == 200 and "cors" in resp.text
        assert resp.headers["access-control-allow-origin"] == ORIGIN
        exposed = resp.headers["access-control-expose-headers"].lower()
        assert "x-session-id" in exposed and "x-request-id" in exposed
    assert "access-control-allow-origin" not in other.headers


def test_a_refused_cors_preflight_is_an_openai_error(settings: Settings) -> None:
    """Starlette's CORS middleware answers a preflight it refuses with plain text ("Disallowed
    CORS origin"); every other error the proxy makes is OpenAI's JSON, which a client that
    logs ``error.message`` reads. A refused origin is still granted nothing."""
    server = ProxyServer(settings.model_copy(update={"cors_origins": ORIGIN}))
    server.start()
    try:
        with httpx.Client(base_url=server.origin, timeout=10) as http:
            refused = http.options(
                "/v1/chat/completions",
                headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
            )
            method = http.options(
                "/v1/models",
                headers={"origin": ORIGIN, "access-control-request-method": "BREW"},
            )
    finally:
        server.stop()
    for resp, word in ((refused, "origin"), (method, "method")):
        assert resp.status_code == 400, resp.text
        assert resp.headers["content-type"] == "application/json"
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "cors_refused"
        assert f"CORS {word}" in error["message"]
    assert "access-control-allow-origin" not in refused.headers


def test_a_wrong_method_on_a_known_path_is_an_openai_405(http: httpx.Client) -> None:
    for method, path, allow in [
        ("DELETE", "/v1/models", "GET, HEAD"),
        ("POST", "/v1/models", "GET, HEAD"),
        ("DELETE", "/s/run-1/v1/models", "GET, HEAD"),
        ("GET", "/v1/embeddings", "POST"),
        ("PATCH", "/v1/memory", "GET, HEAD, POST"),
        # the suggestions list is no fact id: DELETE /v1/memory/{fact_id} took it, so a
        # DELETE was a 400 on fact_id and a POST's Allow offered a DELETE that always failed
        ("POST", "/v1/memory/suggestions", "GET, HEAD"),
        ("DELETE", "/v1/memory/suggestions", "GET, HEAD"),
    ]:
        resp = http.request(method, path)
        assert resp.status_code == 405, (method, path, resp.text)
        assert resp.headers["allow"] == allow, (method, path)
        error = resp.json()["error"]
        assert error["code"] == "method_not_allowed" and f"use {allow}" in error["message"]
