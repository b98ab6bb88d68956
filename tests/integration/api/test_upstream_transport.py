"""How the proxy reaches providers: egress proxies from the environment and private CAs
(answers the provider compresses: test_upstream_compression.py). Every provider here is a
real server on loopback."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.fakes.egress_proxy import EgressProxy
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, write_config

HOST = "provider.cascade.test"  # resolved by the egress proxy alone
_PROXY_VARS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy or CA variable of the machine's leaks in; each test sets its own."""
    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def start(start_proxy: StartProxy, tmp_path: Path) -> Any:
    """Start a proxy on a config of ``providers`` (name -> block); one agent per provider,
    selected by a request's model naming it; no tiktoken (it would fetch through the egress
    proxy). Stopped afterwards."""
    configs = 0

    def run(**providers: dict[str, Any]) -> ProxyServer:
        nonlocal configs
        configs += 1
        agents = {name: {"provider": name} for name in providers}
        config = write_config(
            tmp_path / f"cfg{configs}.json",
            "http://unused.invalid/v1",
            providers=providers,
            agents={"default": {"provider": next(iter(providers))}, **agents},
        )
        return start_proxy(config, tokenizer="")

    return run


def _chat(server: ProxyServer, model: str = "gpt-fake") -> httpx.Response:
    with httpx.Client(
        base_url=server.origin,
        trust_env=False,
        timeout=20,
        headers={"authorization": "Bearer sk-test"},
    ) as http:
        return http.post(
            "/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        )


def _provider(base_url: str, **extra: Any) -> dict[str, Any]:
    return {"baseUrl": base_url, "timeoutSeconds": 10, "connectTimeoutSeconds": 3, **extra}


# --------------------------------------------------------------------------- egress proxies


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY"])
def test_a_provider_only_the_egress_proxy_resolves_is_reached_through_it(
    variable: str,
    start: Any,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with EgressProxy({HOST: "127.0.0.1"}) as egress:
        monkeypatch.setenv(variable, egress.url)
        proxy = start(openai=_provider(f"http://{HOST}:{fake_upstream.port}/v1"))
        resp = _chat(proxy)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "ok"
    assert egress.seen == [f"http://{HOST}:{fake_upstream.port}/v1/chat/completions"]


def test_no_proxy_sends_a_host_direct(
    start: Any,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with EgressProxy({HOST: "127.0.0.1"}) as egress:
        monkeypatch.setenv("HTTP_PROXY", egress.url)
        monkeypatch.setenv("NO_PROXY", f"localhost,{HOST},127.0.0.1")
        proxy = start(
            hidden=_provider(f"http://{HOST}:{fake_upstream.port}/v1"),
            local=_provider(f"{fake_upstream.url}"),
        )
        hidden, local = _chat(proxy, "hidden"), _chat(proxy, "local")
    assert egress.seen == []  # neither went through the proxy
    assert local.status_code == 200, local.text  # 127.0.0.1 was reached direct
    assert hidden.status_code == 502  # and the hidden host does not resolve here
    message = hidden.json()["error"]["message"]
    assert f"the provider 'hidden' at http://{HOST}:{fake_upstream.port}" in message
    assert "name resolution failed" in message


def test_a_provider_in_a_no_proxy_cidr_is_reached_direct(
    start: Any,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``NO_PROXY=127.0.0.0/8`` as curl and Go read it: the provider at 127.0.0.1 goes
    direct, the one named by a host name through the egress proxy."""
    with EgressProxy({HOST: "127.0.0.1"}) as egress:
        monkeypatch.setenv("HTTP_PROXY", egress.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.0/8")
        proxy = start(
            local=_provider(fake_upstream.url),
            named=_provider(f"http://{HOST}:{fake_upstream.port}/v1"),
        )
        local, named = _chat(proxy, "local"), _chat(proxy, "named")
    assert (local.status_code, named.status_code) == (200, 200), (local.text, named.text)
    assert egress.seen == [f"http://{HOST}:{fake_upstream.port}/v1/chat/completions"]


def test_an_https_provider_is_tunnelled_through_https_proxy(
    start: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca = trustme.CA()
    with (
        _https_upstream(ca, tmp_path, HOST) as upstream,
        EgressProxy({HOST: "127.0.0.1"}) as egress,
    ):
        monkeypatch.setenv("HTTPS_PROXY", egress.url)
        ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        proxy = start(
            openai=_provider(f"https://{HOST}:{upstream.port}/v1", caFile=str(tmp_path / "ca.pem"))
        )
        resp = _chat(proxy)
    assert resp.status_code == 200, resp.text
    assert egress.seen == [f"{HOST}:{upstream.port}"]  # a CONNECT tunnel, TLS inside it


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
def test_an_egress_proxy_that_refuses_is_named_in_the_502(
    kind: str, start_proxy: StartProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The provider is fine as far as anyone knows: the proxy in front of it is what refused,
    # and the message says so (without the proxy's password) instead of blaming the provider.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://user:pw-SECRET@127.0.0.1:{closed}")
    config = write_config(
        tmp_path / "cfg.json",
        "http://unused.invalid/v1",
        providers={"openai": _provider(f"http://{HOST}:9/v1")},
    )
    resp = _chat(start_proxy(config, tokenizer="", http_transport=kind))
    assert resp.status_code == 502, resp.text
    message = resp.json()["error"]["message"]
    assert (
        f"the provider 'openai' at http://{HOST}:9 through the egress proxy"
        f" http://127.0.0.1:{closed}: connection refused" in message
    ), message
    assert "HTTP_PROXY" in message and "pw-SECRET" not in message


# --------------------------------------------------------------------------- private CAs


def _https_upstream(ca: trustme.CA, tmp_path: Path, *names: str) -> FakeUpstream:
    cert = ca.issue_cert(*(names or ("127.0.0.1",)))
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    pem = str(tmp_path / "server.pem")
    return FakeUpstream(tls=(pem, pem))


def test_a_private_ca_is_trusted_per_provider(start: Any, tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    with _https_upstream(ca, tmp_path) as upstream:
        proxy = start(
            plain=_provider(upstream.url),
            trusting=_provider(upstream.url, caFile=str(tmp_path / "ca.pem")),
            unchecked=_provider(upstream.url, verifyTls=False),
            missing=_provider(upstream.url, caFile=str(tmp_path / "nowhere.pem")),
        )
        plain, trusting, unchecked, missing = (
            _chat(proxy, m) for m in ("plain", "trusting", "unchecked", "missing")
        )
    assert plain.status_code == 502
    error = plain.json()["error"]
    assert error["code"] == "upstream_unreachable"
    assert f"the provider 'plain' at https://127.0.0.1:{upstream.port}" in error["message"]
    assert "certificate verify failed" in error["message"] and "caFile" in error["message"]
    assert trusting.status_code == 200, trusting.text
    assert unchecked.status_code == 200, unchecked.text
    assert missing.status_code == 502
    assert (
        f"its caFile {tmp_path / 'nowhere.pem'} cannot be loaded (No such file or directory)"
        in missing.json()["error"]["message"]
    )


def test_ssl_cert_file_is_honoured(
    start: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    with _https_upstream(ca, tmp_path) as upstream:
        resp = _chat(start(openai=_provider(upstream.url)))
    assert resp.status_code == 200, resp.text
