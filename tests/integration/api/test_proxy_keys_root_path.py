"""The proxy-key gate under uvicorn's ``--root-path`` (a proxy mounted under a prefix, the
front server stripping it): uvicorn then puts the prefix in front of every ``path`` it hands
the app, and the router routes the path without it. The gate must judge the same path the
router routes, or ``/metrics`` would be an ordinary gated route (any tenant's key opening
every tenant's figures) and ``/healthz`` and the console's shell would need a key."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config

TENANT_KEY = "cascade-key-root-7d1c20"
METRICS_KEY = "cascade-metrics-root-40be9a"


def test_under_a_root_path_the_gate_judges_the_routed_path(
    db_dsn: str, fake_upstream: FakeUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_TEST_ROOT_KEY", TENANT_KEY)
    monkeypatch.setenv("CASCADE_TEST_ROOT_METRICS", METRICS_KEY)
    auth = {
        "keys": [{"keyEnv": "CASCADE_TEST_ROOT_KEY", "tenant": "t"}],
        "metricsKeyEnv": "CASCADE_TEST_ROOT_METRICS",
    }
    config = write_config(tmp_path / "agents.json", fake_upstream.url, auth=auth)
    settings = Settings(database_url=db_dsn, config=config, watch_config=False)
    server = ProxyServer(settings, root_path="/cascade").start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key=TENANT_KEY, max_retries=0)
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "ok"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.url, api_key="not-a-key", max_retries=0).models.list()
        with httpx.Client(base_url=server.origin, timeout=10) as http:
            tenant = http.get("/metrics", headers={"authorization": f"Bearer {TENANT_KEY}"})
            assert tenant.status_code == 401, tenant.text
            assert "metricsKeyEnv" in tenant.json()["error"]["message"]
            scraped = http.get("/metrics", headers={"authorization": f"Bearer {METRICS_KEY}"})
            assert scraped.status_code == 200 and "cascade_requests_total" in scraped.text
            assert http.get("/healthz").status_code == 200
            assert http.get("/ui").status_code == 200
            assert http.get("/v1/sessions").status_code == 401
    finally:
        server.stop()
