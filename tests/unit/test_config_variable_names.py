"""A key of config/agents.json that names an environment variable (``apiKeyEnv``,
``keyEnv``, ``metricsKeyEnv``) takes a variable's name: a key pasted there instead is
refused without being quoted, since the name is printed by the start-up block, the
warnings and ``config check``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from proxy.config import ConfigError, parse_config

SECRET = "sk-proj-Abc123SECRETvalue"


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (
            {"providers": {"p": {"baseUrl": "http://h/v1", "apiKeyEnv": SECRET}}},
            "provider p: its apiKeyEnv is",
        ),
        ({"auth": {"keys": [{"keyEnv": SECRET, "tenant": "t"}]}}, "auth.keys.0.keyEnv:"),
        (
            {"auth": {"keys": [{"keyEnv": SECRET, "tenant": t} for t in "ab"]}},
            "auth.keys.0.keyEnv:",
        ),
        ({"auth": {"metricsKeyEnv": SECRET}}, "auth.metricsKeyEnv:"),
        ({"auth": {"metricsKeyEnv": "MY KEY"}}, "auth.metricsKeyEnv:"),
        ({"auth": {"metricsKeyEnv": "9KEY"}}, "auth.metricsKeyEnv:"),
    ],
)
def test_a_value_that_is_no_variable_name_is_refused_unquoted(
    raw: dict[str, Any], where: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    reason = str(refused.value)
    assert reason.startswith(f"{where} not an environment variable's name"), reason
    assert "never the key itself" in reason
    assert SECRET not in reason and "MY KEY" not in reason and "9KEY" not in reason


def test_a_variable_name_of_any_case_is_taken() -> None:
    raw = {
        "providers": {"p": {"baseUrl": "http://h/v1", "apiKeyEnv": "_my_Key2"}},
        "auth": {"keys": [{"keyEnv": "TEAM_A", "tenant": "a"}], "metricsKeyEnv": "m"},
    }
    cfg = parse_config(raw, env={})
    assert cfg.variables() == {"_my_Key2", "TEAM_A", "m", "OPENAI_API_KEY"}


def test_config_check_never_prints_a_key_pasted_as_a_variable_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was valid, and each warning then quoted the key: ``$sk-proj-… is unset``."""
    config = tmp_path / "agents.json"
    raw = {
        "providers": {"openai": {"baseUrl": "http://h/v1", "apiKeyEnv": SECRET}},
        "auth": {"keys": [{"keyEnv": f"{SECRET}-2", "tenant": "a"}]},
    }
    config.write_text(json.dumps(raw))
    assert main(["config", "check", "--config", str(config)]) == 2
    said = capsys.readouterr()
    assert SECRET not in said.out + said.err
    assert "provider openai: its apiKeyEnv is not an environment variable's name" in said.err


@pytest.mark.parametrize(
    ("provider_env", "env"),
    [
        ("K_A", {"K_A": "shared-key"}),  # one variable for both
        ("PROVIDER_KEY", {"K_A": "shared-key", "PROVIDER_KEY": " shared-key\n"}),
        ("K_A", {}),  # unset: the same variable still, once it is set
    ],
)
def test_a_provider_key_that_is_a_proxy_key_is_refused_unquoted(
    provider_env: str, env: dict[str, str]
) -> None:
    """The provider never sees a proxy key (README, Proxy keys): one that is the provider's
    own key too went upstream on every call, and each tenant holding it could call the
    provider around the proxy."""
    raw = {
        "providers": {"p": {"baseUrl": "http://h/v1", "apiKeyEnv": provider_env}},
        "agents": {"default": {"provider": "p"}},
        "auth": {"keys": [{"keyEnv": "K_A", "tenant": "a"}]},
    }
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env=env)
    reason = str(refused.value)
    assert reason.startswith(f"provider p: its apiKeyEnv ${provider_env} "), reason
    assert "auth.keys[0]" in reason and "shared-key" not in reason
    # one variable for both was said as "$K_A is $K_A (auth.keys[0])"
    assert f"${provider_env} is ${provider_env}" not in reason


def test_a_kubernetes_variable_name_is_taken() -> None:
    """Kubernetes and Docker take ``-`` and ``.`` in a variable's name, and a Secret loaded
    with ``envFrom`` names each variable by its key (``openai-api-key``); these were valid."""
    raw = {
        "providers": {"p": {"baseUrl": "http://h/v1", "apiKeyEnv": "openai-api-key"}},
        "auth": {"keys": [{"keyEnv": "team.a.key", "tenant": "a"}], "metricsKeyEnv": "m-key"},
    }
    cfg = parse_config(raw, env={})
    assert cfg.variables() == {"openai-api-key", "team.a.key", "m-key", "OPENAI_API_KEY"}


@pytest.mark.parametrize(
    "key", ["ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAIOSFODNN7EXAMPLE", f"{SECRET}-2"]
)
def test_a_key_spelled_as_a_name_is_refused_unquoted(key: str) -> None:
    """A key of a known shape is refused though letters, digits and ``_`` spell it: the
    name would be printed, and the secret patterns the redaction uses know it for a key."""
    raw = {"providers": {"p": {"baseUrl": "http://h/v1", "apiKeyEnv": key}}}
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert "provider p: its apiKeyEnv is not an environment variable's name" in str(refused.value)
    assert key not in str(refused.value)


def test_a_proxy_key_in_a_provider_no_agent_calls_is_taken() -> None:
    """A shell or a Compose ``.env`` shared with the clients has ``OPENAI_API_KEY`` hold the
    proxy key (OpenAI's SDKs read it); the default ``openai`` provider, which no agent of
    this file calls, never sends it, so it is no reason to refuse the start."""
    raw = {
        "providers": {"local": {"baseUrl": "http://localhost:8000/v1"}},
        "agents": {"default": {"provider": "local"}},
        "auth": {"keys": [{"keyEnv": "CASCADE_KEY", "tenant": "me"}]},
    }
    env = {"CASCADE_KEY": "cx-shared", "OPENAI_API_KEY": "cx-shared"}
    assert parse_config(raw, env=env).providers["openai"].api_key_env == "OPENAI_API_KEY"
    raw["embedding"] = {"provider": "openai", "model": "text-embedding-3-small"}
    with pytest.raises(ConfigError, match=r"^provider openai: its apiKeyEnv "):
        parse_config(raw, env=env)  # the embedder calls it
