"""HEAD on every GET route answers as the GET does, with no body: what a load balancer or an
uptime checker sends. The routes are read from the app's route table, so a route added later
is covered without touching this file."""

from __future__ import annotations

import logging
import re
import time

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from starlette.routing import Mount

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer

SESSION = "head-probe"


def _get_paths(proxy: ProxyServer) -> list[str]:
    """Every GET route's path, its parameters filled with the session made here (a
    ``{model:path}`` with a model name); a mount's with a file under it."""
    out = []
    for context in iter_route_contexts(proxy.app.routes):
        if isinstance(context.route, Mount):
            out.append(context.path + "/app.js")
        elif "GET" in (context.methods or ()):
            path = re.sub(r"\{model:path\}", "gpt-4o", context.path)
            out.append(re.sub(r"\{[^}]+\}", SESSION, path))
    return out


def test_head_on_every_get_route_has_the_gets_status_and_headers_and_no_body(
    proxy: ProxyServer, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("hello"))
    made = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": SESSION},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert made.status_code == 200, made.text
    paths = _get_paths(proxy)
    assert {"/healthz", "/readyz", "/metrics", "/v1/models", "/v1/sessions"} <= set(paths)
    assert f"/v1/sessions/{SESSION}/events" in paths  # an event stream: headers, then the end
    for path in paths:
        with http.stream("GET", path) as got:  # a stream's headers, without waiting it out
            status, content_type = got.status_code, got.headers.get("content-type")
        started = time.monotonic()
        head = http.head(path)
        assert head.status_code == status != 405, (path, head.status_code, status)
        assert head.headers.get("content-type") == content_type, path
        assert head.content == b"", path
        assert time.monotonic() - started < 5, path  # a stream's HEAD ends with its headers
    health = http.get("/healthz")
    assert http.head("/healthz").headers["content-length"] == health.headers["content-length"]
    # still over the same connection: a HEAD leaves nothing behind on it
    assert http.get("/healthz").json() == {"status": "ok"}


def test_head_on_a_route_without_get_still_answers_as_its_get(
    http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cascade")
    assert http.head("/v1/chat/completions").status_code == 405
    assert http.head("/no/such/route").status_code == 404
    # the error lines name the method the client sent, not the GET the routes were handed
    lines = [r.getMessage() for r in caplog.records if r.name == "cascade"]
    assert (
        "405 HEAD /v1/chat/completions: /v1/chat/completions does not take HEAD; use POST" in lines
    )
    assert "404 HEAD /no/such/route: Invalid URL (HEAD /no/such/route)" in lines


def test_a_head_is_counted_under_its_routes_template(http: httpx.Client) -> None:
    assert http.head("/v1/sessions/some-session").status_code == 404
    assert http.head("/healthz").status_code == 200
    text = http.get("/metrics").text
    assert 'cascade_requests_total{method="HEAD",route="/healthz",status="200"} 1.0' in text
    routed = 'method="HEAD",route="/v1/sessions/{session_id}",status="404"} 1.0'
    assert routed in text
