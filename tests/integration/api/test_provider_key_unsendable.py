"""A provider key no HTTP header can carry (two lines of a secrets file, a character pasted
from a web page): the request is refused naming the variable, never the value. httpx's own
transport quoted the whole header, key included, in the 502's logged cause and called it an
unreachable provider; the aiohttp one answered an internal error with a traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import openai
import pytest

from proxy.logs import TextFormatter
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, write_config

SECRET = "sk-unsendable-SECRET-5a7e"


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
@pytest.mark.parametrize("value", [f"{SECRET}\nsecond-line", f"{SECRET}\u2026"])
def test_a_key_no_header_can_carry_is_refused_naming_its_variable(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    records: Records,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    transport: str,
    value: str,
) -> None:
    monkeypatch.setenv("CASCADE_TEST_PROVIDER_KEY", value)
    provider = {"baseUrl": fake_upstream.url, "apiKeyEnv": "CASCADE_TEST_PROVIDER_KEY"}
    config = write_config(
        tmp_path / "agents.json", fake_upstream.url, providers={"openai": provider}
    )
    server = start_proxy(config, http_transport=transport)
    client = openai.OpenAI(base_url=server.url, api_key="client-key", max_retries=0)
    with pytest.raises(openai.InternalServerError) as refused:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    message = refused.value.body["message"]  # type: ignore[index]
    assert "$CASCADE_TEST_PROVIDER_KEY" in message and "SECRET" not in message
    assert fake_upstream.requests == []
    records.access(1)
    logged = "\n".join(TextFormatter().format(r) for r in records.records)
    assert "$CASCADE_TEST_PROVIDER_KEY" in logged
    assert "SECRET" not in logged
    assert not [r for r in records.records if r.levelno >= logging.ERROR]
