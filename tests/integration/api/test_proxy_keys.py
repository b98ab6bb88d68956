"""Proxy keys through the real proxy: every route closed without one (the routes are read
from the app, so a route added later is covered), keys limited to agents, the pass-through
refusal of a request with no bearer that the proxy's own provider key would pay for, and the
gate following the config in force."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi.routing import iter_route_contexts
from starlette.routing import Mount

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

KEY_A = "cascade-key-a-5e1f0b"
KEY_B = "cascade-key-b-93d7aa"
UPSTREAM_SECRET = "sk-upstream-77c2e1"
HI = [{"role": "user", "content": "hi"}]
OPEN = {"/healthz", "/readyz"}  # the probes: status only, for a load balancer
AGENTS = {"default": {"provider": "openai"}, "coder": {"provider": "openai"}}


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("CASCADE_TEST_KEY_A", KEY_A)
    monkeypatch.setenv("CASCADE_TEST_KEY_B", KEY_B + "\n")  # a secret file's newline
    return {
        "keys": [
            {"keyEnv": "CASCADE_TEST_KEY_A", "tenant": "team", "agents": ["coder"]},
            {"keyEnv": "CASCADE_TEST_KEY_B", "tenant": "team"},
        ]
    }


def _requests(app: Any) -> list[tuple[str, str]]:
    """(method, path) for every route of the app, path parameters filled in."""
    out = []
    for context in iter_route_contexts(app.routes):
        path = re.sub(r"\{[^}]+\}", "x1", context.path)
        if isinstance(context.route, Mount):
            out.append(("GET", path + "/probe"))
            continue
        out += [(m, path) for m in sorted(set(context.methods or ()) - {"HEAD"})]
    return out


def test_every_route_but_the_probes_and_the_ui_shell_needs_a_proxy_key(
    start_proxy: StartProxy,
    keys: dict[str, Any],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    agents = {"default": {"provider": "openai"}, "coder": {"provider": "openai"}}
    server = start_proxy(
        write_config(tmp_path / "agents.json", fake_upstream.url, auth=keys, agents=agents)
    )
    requests = _requests(server.app)
    paths = {p for _, p in requests}
    assert {
        "/v1/chat/completions",
        "/s/x1/v1/chat/completions",
        "/v1/models",
        "/v1/embeddings",
        "/v1/sessions",
        "/v1/sessions/x1/events",
        "/readyz",
        "/openapi.json",
        "/docs",
        "/redoc",
        "/v1/memory",
        "/v1/memory/x1",
        "/v1/memory/suggestions/x1/accept",
    } <= paths
    bodies = []
    with httpx.Client(base_url=server.origin, timeout=10) as http:
        for method, path in requests:
            for headers in (
                {},
                {"authorization": "Bearer wrong"},
                {"authorization": f"Basic {KEY_B}"},
                {"authorization": f"Bearer {KEY_A}x"},
            ):
                resp = http.request(method, path, headers=headers, json={})
                bodies.append(resp.text)
                if path in OPEN:
                    assert resp.status_code == 200, (method, path)
                    continue
                if method == "GET" and (path == "/ui" or path.startswith("/ui/")):
                    assert resp.status_code in (200, 404), (path, resp.text)  # the shell
                    continue
                assert resp.status_code == 401, (method, path, headers, resp.text)
                error = resp.json()["error"]
                assert set(error) == {"message", "type", "param", "code"}
                assert error["code"] == "invalid_api_key"
                assert resp.headers["www-authenticate"] == "Bearer"
        # no route to learn of without a key; the /ui shell loads, and holds no data
        assert http.get("/no/such/route").status_code == 401
        assert http.get("/ui").status_code == 200
        assert http.get("/ui/static/app.js").status_code == 200
        assert http.get("/ui/app.js").status_code == 404
        assert http.post("/ui/static/app.js").status_code == 401
        assert http.get("/readyz").json() == {"status": "ok", "database": "ok", "events": "ok"}
        good = {"authorization": f"Bearer {KEY_B}"}
        for path in ("/readyz", "/openapi.json", "/docs", "/v1/sessions", "/v1/models"):
            assert http.get(path, headers=good).status_code == 200, path
        assert (
            http.get("/v1/sessions", headers={"authorization": f"bearer {KEY_A}"}).status_code
            == 200
        )
    assert fake_upstream.requests[-1].path.endswith("/models")
    assert len(fake_upstream.requests) == 1  # nothing refused reached the provider
    for secret in (KEY_A, KEY_B):
        assert secret not in caplog.text
        assert not any(secret in body for body in bodies)


def test_a_key_limited_to_agents_gets_403_for_any_other(
    start_proxy: StartProxy,
    keys: dict[str, Any],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    agents = {
        "default": {"provider": "openai"},
        "coder": {"provider": "openai"},
        "reviewer": {"provider": "openai"},
    }
    server = start_proxy(
        write_config(tmp_path / "agents.json", fake_upstream.url, auth=keys, agents=agents)
    )
    limited = openai.OpenAI(base_url=server.url, api_key=KEY_A, max_retries=0)
    full = openai.OpenAI(base_url=server.url, api_key=KEY_B, max_retries=0)
    limited.chat.completions.create(model="coder", messages=HI, extra_headers={"X-Session-Id": "c"})
    for model in ("reviewer", "gpt-4o"):  # another agent; an unnamed model is "default"
        with pytest.raises(openai.PermissionDeniedError) as denied:
            limited.chat.completions.create(model=model, messages=HI)
        assert denied.value.status_code == 403
        assert denied.value.code == "agent_not_allowed"
        assert KEY_A not in denied.value.message
    with pytest.raises(openai.PermissionDeniedError):
        list(limited.chat.completions.create(model="reviewer", messages=HI, stream=True))
    with pytest.raises(openai.PermissionDeniedError):  # the default agent's provider
        limited.models.list()
    sent = len(fake_upstream.requests)
    assert sent == 1
    full.chat.completions.create(model="reviewer", messages=HI, extra_headers={"X-Session-Id": "r"})
    full.models.list()
    # the session API reaches the key's agents' sessions only (test_agent_keys_sessions.py)
    with httpx.Client(
        base_url=server.origin, timeout=30, headers={"authorization": f"Bearer {KEY_A}"}
    ) as http:
        assert {s["id"] for s in http.get("/v1/sessions").json()["data"]} == {"c"}
        refused = http.post("/v1/sessions/r/compact")
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["type"] == "request_forbidden"
        assert http.post("/v1/sessions/c/compact").status_code == 200
        # memory scopes follow the key's agents; global is the tenant's
        for scope, status in (("agent:reviewer", 403), ("agent:coder", 201), ("global", 201)):
            added = http.post("/v1/memory", json={"scope": scope, "text": "Port is 8443"})
            assert added.status_code == status, added.text
            # the field at fault, as the 400 of a scope no prompt carries names it
            assert status != 403 or added.json()["error"]["param"] == "scope"
        with httpx.Client(
            base_url=server.origin, timeout=30, headers={"authorization": f"Bearer {KEY_B}"}
        ) as unlimited:
            theirs = unlimited.post(
                "/v1/memory", json={"scope": "agent:reviewer", "text": "Reviewer fact"}
            ).json()["id"]
        deleted = http.delete(f"/v1/memory/{theirs}")  # the fact's scope: no field sent
        assert (deleted.status_code, deleted.json()["error"]["param"]) == (403, None)
        listed = http.get("/v1/memory", params={"scope": "agent:reviewer"})
        assert (listed.status_code, listed.json()["error"]["param"]) == (403, "scope")


def test_once_the_scraper_has_its_key_no_tenant_key_opens_metrics(
    start_proxy: StartProxy,
    keys: dict[str, Any],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The metrics count every tenant's requests and name the models their clients send."""
    monkeypatch.setenv("CASCADE_TEST_METRICS_KEY", "cascade-metrics-key-1f04")
    auth = keys | {"metricsKeyEnv": "CASCADE_TEST_METRICS_KEY"}
    server = start_proxy(
        write_config(tmp_path / "agents.json", fake_upstream.url, auth=auth, agents=AGENTS)
    )
    with httpx.Client(base_url=server.origin, timeout=10) as http:
        for key in (KEY_A, KEY_B):
            refused = http.get("/metrics", headers={"authorization": f"Bearer {key}"})
            assert refused.status_code == 401, refused.text
            assert "metricsKeyEnv" in refused.json()["error"]["message"]
        scraped = http.get("/metrics", headers={"authorization": "Bearer cascade-metrics-key-1f04"})
        assert scraped.status_code == 200 and "cascade_requests_total" in scraped.text
        sessions = http.get("/v1/sessions", headers={"authorization": f"Bearer {KEY_B}"})
        assert sessions.status_code == 200


def test_pass_through_refuses_no_bearer_when_the_provider_key_would_pay(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CASCADE_TEST_UPSTREAM", UPSTREAM_SECRET)
    provider = {"baseUrl": fake_upstream.url, "apiKeyEnv": "CASCADE_TEST_UPSTREAM"}
    server = start_proxy(
        write_config(tmp_path / "agents.json", fake_upstream.url, providers={"openai": provider})
    )
    chat = {"model": "m", "messages": HI}
    with httpx.Client(base_url=server.origin, timeout=10) as http:
        for headers in ({}, {"authorization": "Bearer"}, {"authorization": "bearer"}):
            refused = http.post("/v1/chat/completions", json=chat, headers=headers)
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "invalid_api_key"
            assert http.get("/v1/sessions", headers=headers).status_code == 401
            assert http.get("/v1/models", headers=headers).status_code == 401
        assert fake_upstream.requests == []
        for path in ("/healthz", "/readyz", "/openapi.json"):  # probes and the document
            assert http.get(path).status_code == 200, path
        ok = http.post(
            "/v1/chat/completions", json=chat, headers={"authorization": "Bearer sk-client"}
        )
        assert ok.status_code == 200
        # the environment is read per request: without the provider key, nobody pays
        monkeypatch.delenv("CASCADE_TEST_UPSTREAM")
        assert http.post("/v1/chat/completions", json=chat).status_code == 200


def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the reloaded config was not applied"
        time.sleep(0.05)


def test_the_gate_follows_the_config_in_force(
    start_proxy: StartProxy,
    keys: dict[str, Any],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    server = start_proxy(config, watch_config=True)
    with httpx.Client(base_url=server.origin, timeout=10) as http:
        assert http.get("/v1/sessions").status_code == 200  # pass-through, nobody pays
        write_config(config, fake_upstream.url, auth=keys, agents=AGENTS)
        _until(lambda: http.get("/v1/sessions").status_code == 401)
        ok = http.get("/v1/sessions", headers={"authorization": f"Bearer {KEY_B}"})
        assert ok.status_code == 200


def test_on_a_non_loopback_address_a_reload_without_keys_closes_every_door(
    start_proxy: StartProxy,
    keys: dict[str, Any],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url, auth=keys, agents=AGENTS)
    server = start_proxy(config, watch_config=True, host="0.0.0.0")  # noqa: S104 (the rule under test)
    with httpx.Client(base_url=server.origin, timeout=10) as http:
        good = {"authorization": f"Bearer {KEY_B}"}
        assert http.get("/v1/sessions", headers=good).status_code == 200
        config.write_text(json.dumps({"providers": {"openai": {"baseUrl": fake_upstream.url}}}))
        _until(lambda: http.get("/v1/sessions", headers=good).status_code == 401)
        refused = http.get("/openapi.json", headers=good).json()["error"]["message"]
        assert "non-loopback" in refused
        assert http.get("/healthz").status_code == 200
        assert http.get("/readyz").status_code == 200


def test_the_start_up_block_is_logged_once_without_a_secret(
    start_proxy: StartProxy,
    keys: dict[str, Any],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("CASCADE_TEST_UPSTREAM", UPSTREAM_SECRET)
    provider = {"baseUrl": fake_upstream.url, "apiKeyEnv": "CASCADE_TEST_UPSTREAM"}
    start_proxy(
        write_config(
            tmp_path / "agents.json",
            fake_upstream.url,
            auth=keys,
            agents=AGENTS,
            providers={"openai": provider},
        )
    )
    starts = [r for r in caplog.records if r.name == "cascade.start"]
    assert sum(r.getMessage().startswith("Cascade ") for r in starts) == 1
    # a line per record: the text format would print a line break inside one as "\\n"
    assert len(starts) > 1 and not any("\n" in r.getMessage() for r in starts)
    block = "\n".join(r.getMessage() for r in starts)
    assert "base URL for clients: http://127.0.0.1:8080/v1" in block
    assert "key $CASCADE_TEST_UPSTREAM set" in block and "proxy keys: 2" in block
    assert "database: postgresql://" in block and "stages for agent coder" in block
    for secret in (KEY_A, KEY_B, UPSTREAM_SECRET):
        assert secret not in caplog.text
