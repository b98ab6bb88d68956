"""ProxyAuth on its own, in front of a small app with the routes the gate treats specially
(``/metrics`` is added by another part of the proxy; a websocket route stands for any
non-HTTP door). The whole proxy behind the gate is tests/integration/api/test_proxy_keys.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from proxy.auth import ProxyAuth
from proxy.config import parse_config
from proxy.config_watch import ConfigHolder
from proxy.credentials import CLIENT_KEY_HEADERS

ENV = {"PROXY_KEY": "proxy-secret", "METRICS_KEY": "metrics-secret", "PAID": "sk-paid"}


async def _ok(request: Any) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def _socket(ws: WebSocket) -> None:
    await ws.accept()
    await ws.send_text("open")
    await ws.close()


def _gate(raw: dict[str, Any], *, require_keys: bool = False) -> tuple[ProxyAuth, ConfigHolder]:
    app = Starlette(
        routes=[
            Route("/metrics", _ok),
            Route("/v1/things", _ok, methods=["GET"]),
            Route("/readyz", _ok),
            WebSocketRoute("/ws", _socket),
        ]
    )
    holder = ConfigHolder(parse_config(raw), None)
    return ProxyAuth(app, holder, require_keys=require_keys, env=ENV), holder


async def _get(gate: ProxyAuth, path: str, token: str | None = None) -> int:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(gate), base_url="http://proxy"
    ) as http:
        return (await http.get(path, headers=headers)).status_code


async def test_the_metrics_key_opens_metrics_only() -> None:
    keyed, _ = _gate(
        {"auth": {"keys": [{"keyEnv": "PROXY_KEY", "tenant": "t"}], "metricsKeyEnv": "METRICS_KEY"}}
    )
    assert await _get(keyed, "/metrics", "metrics-secret") == 200
    # the metrics count every tenant's traffic: once the scraper has its key, a tenant's
    # proxy key no longer opens them
    assert await _get(keyed, "/metrics", "proxy-secret") == 401
    assert await _get(keyed, "/metrics") == 401
    assert await _get(keyed, "/v1/things", "metrics-secret") == 401
    assert await _get(keyed, "/v1/things", "proxy-secret") == 200
    # pass-through: /metrics needs the metrics key once it is set, nothing else changes
    open_, _ = _gate({"auth": {"metricsKeyEnv": "METRICS_KEY"}})
    assert await _get(open_, "/metrics") == 401
    assert await _get(open_, "/metrics", "some-client-key") == 401
    assert await _get(open_, "/metrics", "metrics-secret") == 200
    assert await _get(open_, "/v1/things") == 200  # no provider key pays here
    unset, _ = _gate({"auth": {"metricsKeyEnv": "NOT_SET"}})
    assert await _get(unset, "/metrics") == 200
    # with keys and no metrics key, any proxy key opens /metrics (the only way to scrape)
    keys_only, _ = _gate({"auth": {"keys": [{"keyEnv": "PROXY_KEY", "tenant": "t"}]}})
    assert await _get(keys_only, "/metrics", "proxy-secret") == 200
    assert await _get(keys_only, "/metrics") == 401


async def test_the_gate_reads_the_config_in_force() -> None:
    gate, holder = _gate({})
    assert await _get(gate, "/v1/things") == 200
    holder.current = parse_config({"auth": {"keys": [{"keyEnv": "PROXY_KEY", "tenant": "t"}]}})
    assert await _get(gate, "/v1/things") == 401
    assert await _get(gate, "/v1/things", "proxy-secret") == 200


async def test_no_bearer_is_refused_when_a_provider_key_pays_except_for_probes() -> None:
    gate, _ = _gate({"providers": {"openai": {"baseUrl": "http://h/v1", "apiKeyEnv": "PAID"}}})
    assert await _get(gate, "/v1/things") == 401
    assert await _get(gate, "/v1/things", "any-client-key") == 200
    assert (await _get(gate, "/readyz"), await _get(gate, "/metrics")) == (200, 200)
    # a user in the baseUrl is sent only when the client sends no bearer: not refused
    in_url, _ = _gate({"providers": {"openai": {"baseUrl": "http://u:p@h/v1"}}})
    assert await _get(in_url, "/v1/things") == 200


async def test_required_keys_with_none_configured_close_everything_but_the_probes() -> None:
    gate, _ = _gate({}, require_keys=True)
    for path in ("/v1/things", "/metrics"):
        assert await _get(gate, path, "anything") == 401
    assert await _get(gate, "/readyz") == 200


async def test_readyz_answers_without_a_key_for_a_load_balancer_that_sends_no_header() -> None:
    keyed, _ = _gate(
        {"auth": {"keys": [{"keyEnv": "PROXY_KEY", "tenant": "t"}], "metricsKeyEnv": "METRICS_KEY"}}
    )
    assert await _get(keyed, "/readyz") == 200
    assert await _get(keyed, "/readyz", "wrong") == 200
    assert await _get(keyed, "/v1/things") == 401


def test_a_websocket_is_closed_without_a_key() -> None:
    from starlette.testclient import TestClient

    gate, _ = _gate({"auth": {"keys": [{"keyEnv": "PROXY_KEY", "tenant": "t"}]}})
    client = TestClient(gate)
    with pytest.raises(WebSocketDisconnect) as closed, client.websocket_connect("/ws"):
        pass
    assert closed.value.code == 1008
    with client.websocket_connect("/ws", headers={"authorization": "Bearer proxy-secret"}) as ws:
        assert ws.receive_text() == "open"


async def _get_on(gate: ProxyAuth, local: str, token: str | None = None) -> int:
    """GET /v1/things as if it arrived on the local address ``local`` (ASGI ``server``)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(gate), base_url=f"http://{local}:8080"
    ) as http:
        return (await http.get("/v1/things", headers=headers)).status_code


async def test_without_keys_a_request_on_a_non_loopback_address_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``uvicorn --host 0.0.0.0`` without ``CASCADE_HOST``: the start-up rule saw loopback,
    so the gate judges the address each request arrived on."""
    gate, holder = _gate({})
    for local in ("127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "proxy"):
        assert await _get_on(gate, local) == 200, local
    with caplog.at_level("WARNING", logger="cascade"):
        assert await _get_on(gate, "10.1.2.3", "any-client-key") == 401
        assert await _get_on(gate, "10.1.2.3") == 401
        assert await _get_on(gate, "[2001:db8::1]") == 401
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and "10.1.2.3" in warned[0] and "CASCADE_HOST" in warned[0]
    # keys in force: the key decides, wherever the request arrived
    holder.current = parse_config({"auth": {"keys": [{"keyEnv": "PROXY_KEY", "tenant": "t"}]}})
    assert await _get_on(gate, "10.1.2.3", "proxy-secret") == 200
    assert await _get_on(gate, "10.1.2.3") == 401
    # told to allow it: served
    app = gate.app
    allowed = ProxyAuth(app, ConfigHolder(parse_config({}), None), allow_unauthenticated=True)
    assert await _get_on(allowed, "10.1.2.3") == 200


@pytest.mark.parametrize("header", CLIENT_KEY_HEADERS)
async def test_a_proxy_key_in_an_api_key_header_is_refused_saying_where_it_goes(
    header: str,
) -> None:
    keyed, _ = _gate({"auth": {"keys": [{"keyEnv": "PROXY_KEY", "tenant": "t"}]}})
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(keyed), base_url="http://proxy"
    ) as http:
        refused = await http.get("/v1/things", headers={header: "proxy-secret"})
        plain = await http.get("/v1/things")
    assert refused.status_code == plain.status_code == 401
    assert f"an {header} header holds no proxy key" in refused.json()["error"]["message"]
    assert "api-key" not in plain.json()["error"]["message"]


@pytest.mark.parametrize("header", CLIENT_KEY_HEADERS)
async def test_a_keyless_clients_api_key_header_is_the_key_the_paying_gate_asks_for(
    header: str,
) -> None:
    """Without proxy keys, an ``AzureOpenAI`` client's ``api-key`` (or a client's
    ``x-api-key``) is a key of its own, as a bearer is: a provider the proxy's key pays for
    lets it through; a blank one is none."""
    gate, _ = _gate({"providers": {"openai": {"baseUrl": "http://h/v1", "apiKeyEnv": "PAID"}}})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(gate), base_url="http://p") as http:
        assert (await http.get("/v1/things", headers={header: "azure-key"})).status_code == 200
        assert (await http.get("/v1/things", headers={header: "  "})).status_code == 401


def test_every_client_key_header_has_its_refusals_words() -> None:
    from proxy import auth

    assert set(auth._IN_KEY_HEADER) == {h.encode() for h in CLIENT_KEY_HEADERS}
