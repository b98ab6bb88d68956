"""Regression: without proxy keys, loopback was the proxy's only protection, and a web page
the user had open got past it. A page whose domain was rebound to 127.0.0.1 sent
``Host: attacker.example`` with any bearer and was served, the operator's provider key
paying; a page of another origin POSTed a ``text/plain`` chat or ``…/reset`` with no bearer
(a simple request, no preflight) and was served as tenant ``anonymous``, the baseUrl's own
credentials paying. Both are refused now, unless unauthenticated listening is allowed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from proxy.auth import ProxyAuth
from proxy.config import parse_config
from proxy.config_watch import ConfigHolder

PAID = {"providers": {"openai": {"baseUrl": "http://up/v1", "apiKeyEnv": "PAID"}}}
FREE: dict[str, Any] = {}
KEYED = {"auth": {"keys": [{"keyEnv": "PROXY_KEY", "tenant": "t"}]}}
ENV = {"PAID": "sk-operator", "PROXY_KEY": "proxy-secret"}


async def _ok(request: Any) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _gate(raw: dict[str, Any], **options: Any) -> ProxyAuth:
    app = Starlette(routes=[Route("/v1/things", _ok, methods=["GET", "POST"])])
    return ProxyAuth(app, ConfigHolder(parse_config(raw), None), env=ENV, **options)


async def _post(gate: ProxyAuth, headers: dict[str, str], server: str = "127.0.0.1") -> int:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(gate), base_url=f"http://{server}:8080"
    ) as http:
        resp = await http.post("/v1/things", content=b"{}", headers=headers)
        return resp.status_code


@pytest.mark.parametrize("raw", [PAID, FREE])
async def test_a_foreign_host_on_a_loopback_address_is_refused(raw: dict[str, Any]) -> None:
    gate = _gate(raw)
    rebound = {"host": "attacker.example:8080", "authorization": "Bearer made-up"}
    assert await _post(gate, rebound) == 401
    assert await _post(gate, {**rebound, "host": "attacker.example"}, server="[::1]") == 401
    for host in ("127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "app.localhost"):
        assert await _post(gate, {"host": host, "authorization": "Bearer k"}) == 200, host


async def test_a_page_of_another_origin_without_a_bearer_is_refused() -> None:
    gate = _gate(FREE)
    simple = {"origin": "https://evil.example", "content-type": "text/plain"}
    assert await _post(gate, simple) == 401
    assert await _post(gate, {**simple, "origin": "null"}) == 401
    assert await _post(gate, {}) == 200  # a local client sends no Origin
    same = {"origin": "http://127.0.0.1:8080"}  # the console, served by the proxy itself
    assert await _post(gate, same) == 200
    assert await _post(gate, {**simple, "authorization": "Bearer k"}) == 200  # not a form


async def test_cors_origins_and_allowed_unauthenticated_listening_let_them_through() -> None:
    simple = {"origin": "https://app.example"}
    assert await _post(_gate(FREE, cors_origins=["https://app.example"]), simple) == 200
    assert await _post(_gate(FREE, cors_origins=["*"]), simple) == 200
    allowed = _gate(FREE, allow_unauthenticated=True)
    assert await _post(allowed, simple) == 200
    assert await _post(allowed, {"host": "cascade.internal"}) == 200


async def test_proxy_keys_make_the_host_and_origin_irrelevant() -> None:
    gate = _gate(KEYED)
    key = {"authorization": "Bearer proxy-secret"}
    assert await _post(gate, {**key, "host": "cascade.example.com"}) == 200
    assert await _post(gate, {**key, "origin": "https://app.example"}) == 200


async def test_a_server_address_that_is_no_loopback_ip_is_not_judged_by_host() -> None:
    # an in-process transport names its server after the URL; a Unix socket has none
    assert await _post(_gate(FREE), {"host": "testserver"}, server="testserver") == 200
