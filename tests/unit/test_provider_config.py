"""A provider block's TLS keys and the name messages use for it."""

from __future__ import annotations

import pytest

from proxy.config import ConfigError, parse_config


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
