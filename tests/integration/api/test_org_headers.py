"""``OpenAI-Organization`` and ``OpenAI-Project`` pick among the organisations and projects of
the credential they ride with. With the proxy's own key (``apiKeyEnv``) a client's would pick
among the operator's, so they are forwarded only beside the client's own bearer token (a
provider without a key of its own); ``OpenAI-Beta`` and ``User-Agent`` go either way."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

CLIENT_KEY = "sk-test-client"
KEY_ENV = "CASCADE_TEST_ORG_PROVIDER_KEY"
PICKS = {"OpenAI-Organization": "org-client", "OpenAI-Project": "proj-client"}
OTHERS = {"OpenAI-Beta": "assistants=v2"}


@pytest.mark.parametrize(
    ("provider_key", "forwarded"),
    [("sk-operator", False), (None, True)],
    ids=["proxy_key_drops_them", "client_bearer_keeps_them"],
)
def test_org_and_project_ride_only_with_the_clients_own_key(
    provider_key: str | None,
    forwarded: bool,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if provider_key is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, provider_key)
    provider = {"baseUrl": fake_upstream.url, "apiKeyEnv": KEY_ENV}
    config = write_config(tmp_path / "org.json", fake_upstream.url, providers={"openai": provider})
    server = start_proxy(config)
    client = openai.OpenAI(
        base_url=server.url,
        api_key=CLIENT_KEY,
        max_retries=0,
        default_headers={**PICKS, **OTHERS},
    )

    client.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": "hi"}])
    client.models.list()

    assert len(fake_upstream.requests) == 2
    for seen in fake_upstream.requests:
        sent = seen.headers
        assert sent["authorization"] == f"Bearer {provider_key or CLIENT_KEY}"
        assert sent["openai-beta"] == OTHERS["OpenAI-Beta"]
        for name, value in PICKS.items():
            assert sent.get(name.lower()) == (value if forwarded else None), name


def test_with_proxy_keys_and_no_provider_key_they_stay_back(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client's bearer is then the proxy's secret and never leaves: the provider is
    called without credentials, so the client's picks go with no credential of its own."""
    monkeypatch.setenv("CASCADE_TEST_ORG_PROXY_KEY", "cascade-org-secret")
    monkeypatch.delenv(KEY_ENV, raising=False)
    config = write_config(
        tmp_path / "org-keys.json",
        fake_upstream.url,
        providers={"openai": {"baseUrl": fake_upstream.url, "apiKeyEnv": KEY_ENV}},
        auth={"keys": [{"keyEnv": "CASCADE_TEST_ORG_PROXY_KEY", "tenant": "t"}]},
    )
    server = start_proxy(config)
    client = openai.OpenAI(
        base_url=server.url, api_key="cascade-org-secret", max_retries=0, default_headers=PICKS
    )

    client.models.list()

    sent = fake_upstream.requests[-1].headers
    assert "authorization" not in sent
    assert not {n.lower() for n in PICKS} & set(sent)
