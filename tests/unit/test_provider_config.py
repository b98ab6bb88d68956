"""A provider block's TLS keys, its ``apiVersion`` and the name messages use for it."""

from __future__ import annotations

import httpx
import pytest

from proxy.config import ConfigError, config_warnings, parse_config
from proxy.upstream import Upstream


def test_a_provider_takes_ca_file_and_verify_tls_and_knows_its_name() -> None:
    cfg = parse_config(
        {
            "providers": {
                "local": {
                    "baseUrl": "https://llm.internal/v1",
                    "caFile": "/etc/ca.pem",
                    "verifyTls": False,
                }
            }
        }
    )
    local = cfg.providers["local"]
    assert (local.ca_file, local.verify_tls, local.name) == ("/etc/ca.pem", False, "local")
    assert cfg.providers["openai"].verify_tls and cfg.providers["openai"].ca_file is None
    assert cfg.providers["openai"].name == "openai"


def test_name_is_not_a_file_key() -> None:
    with pytest.raises(ConfigError, match="providers.local.name"):
        parse_config({"providers": {"local": {"name": "other"}}})


def test_the_providers_the_agents_call_are_those_an_agent_names() -> None:
    raw = {
        "providers": {
            "local": {"baseUrl": "http://llm.internal/v1"},
            "spare": {"baseUrl": "http://spare/v1"},
        },
        "agents": {"default": {"provider": "local"}, "coder": {"provider": "local"}},
    }
    assert parse_config(raw).agent_providers() == {"local"}  # not openai, nor spare
    assert parse_config({}).agent_providers() == {"openai"}  # the default agent's


_DEPLOYMENT = "https://x.openai.azure.com/openai/deployments/gpt-4o"


def test_an_azure_deployment_url_without_api_version_is_warned_of() -> None:
    """Its API answers a call without ``api-version`` with a 404: only a client's query
    would send one. Not refused: a client that sends one on every call (Entra ID) works."""
    warned = config_warnings(parse_config({"providers": {"az": {"baseUrl": _DEPLOYMENT}}}), {})
    assert any(w.startswith("providers.az.baseUrl: an Azure deployment URL") for w in warned)
    for quiet in (
        {"baseUrl": _DEPLOYMENT + "/", "apiVersion": "2024-10-21"},
        {"baseUrl": "https://x.openai.azure.com/openai/v1"},  # the v1 API takes none
    ):
        cfg = parse_config({"providers": {"az": quiet}})
        assert not [w for w in config_warnings(cfg, {}) if "Azure" in w], quiet
    for wrong in ("", "2024 10 21"):  # a template's empty value, or no query value
        with pytest.raises(ConfigError, match="apiVersion"):
            parse_config({"providers": {"az": {"baseUrl": _DEPLOYMENT, "apiVersion": wrong}}})


async def test_a_providers_api_version_goes_on_every_call_in_place_of_a_clients() -> None:
    provider = parse_config(
        {"providers": {"az": {"baseUrl": _DEPLOYMENT, "apiVersion": "2024-10-21"}}}
    ).providers["az"]
    async with httpx.AsyncClient() as client:
        upstream = Upstream(client, env={})
        for params in (None, [("api-version", "2025-01-01-preview"), ("route", "eu")]):
            request = upstream._request(
                provider, "POST", "/embeddings", client_headers={}, content=b"{}", params=params
            )
            assert request.url.params.get_list("api-version") == ["2024-10-21"]
            assert request.url.path == "/openai/deployments/gpt-4o/embeddings"
    assert request.url.params["route"] == "eu"  # the rest of the client's query goes on
