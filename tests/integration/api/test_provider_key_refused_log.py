"""A provider that refuses the proxy's own key (``apiKeyEnv``) with 401 or 403 refuses every
tenant's request until the operator fixes the variable, so that answer is logged at WARNING,
naming the variable (never the key); the same status to a client's own forwarded token is
the client's to fix, and stays at INFO as other 4xx answers do."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from tests.fakes.replies import error
from tests.fakes.upstream import CHAT, MODELS, FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, write_config

PROVIDER_KEY = "sk-provider-refused-0123456789"
CLIENT_KEY = "sk-client-own-token-987654321"
_BEARER = {"authorization": f"Bearer {CLIENT_KEY}"}
_REFUSED = {"error": {"message": "Incorrect API key provided.", "code": "invalid_api_key"}}


def _relayed(records: Records) -> list[logging.LogRecord]:
    return [r for r in records.records if "answered 40" in r.getMessage()]


@pytest.mark.parametrize("status", [401, 403])
def test_the_proxys_own_key_refused_is_a_warning_naming_its_variable(
    status: int,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    records: Records,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CASCADE_TEST_REFUSED_KEY", PROVIDER_KEY)
    provider = {"baseUrl": fake_upstream.url, "apiKeyEnv": "CASCADE_TEST_REFUSED_KEY"}
    proxy = start_proxy(write_config(tmp_path / "a.json", "", providers={"openai": provider}))
    fake_upstream.script(error(status, _REFUSED), endpoint=CHAT)
    fake_upstream.script(error(status, _REFUSED), endpoint=MODELS)
    chat = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=proxy.origin, headers=_BEARER) as h:
        assert h.post("/v1/chat/completions", json=chat).status_code == status
        assert h.get("/v1/models").status_code == status
    lines = _relayed(records)
    assert len(lines) == 2, [r.getMessage() for r in lines]
    for line in lines:
        assert line.levelno == logging.WARNING, line.getMessage()
        assert "$CASCADE_TEST_REFUSED_KEY" in line.getMessage()
        assert PROVIDER_KEY not in line.getMessage()


def test_a_clients_own_token_refused_stays_at_info(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, records: Records, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(error(401, _REFUSED), endpoint=CHAT)
    chat = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=proxy.origin, headers=_BEARER) as h:
        assert h.post("/v1/chat/completions", json=chat).status_code == 401
    [line] = _relayed(records)
    assert line.levelno == logging.INFO
    assert "$" not in line.getMessage()
