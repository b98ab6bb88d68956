"""A ``${NAME}`` in config/agents.json is refused, naming its place and the variable: the file
is read as written, never expanded, so a Compose-style reference was sent upstream as the
model's name, or refused as no URL without saying why. And a name no request's ``model``
reaches as it is written (a trailing space) is refused, naming it; ``Default`` is warned of."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import ConfigError, config_warnings, parse_config

NOT_EXPANDED = "which is not expanded: the file is read as written"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            {"agents": {"default": {"model": "${MODEL}"}}},
            f"agents.default.model: the value holds ${{MODEL}}, {NOT_EXPANDED}",
        ),
        (
            {"agents": {"default": {"fastModel": "${FAST:-gpt-4o-mini}"}}},
            f"agents.default.fastModel: the value holds ${{FAST}}, {NOT_EXPANDED}",
        ),
        (
            {"providers": {"openai": {"baseUrl": "https://${HOST}/v1"}}},
            f"providers.openai.baseUrl: the value holds ${{HOST}}, {NOT_EXPANDED}",
        ),
        (
            {"models": {"${MODEL}": {"contextLimit": 8000}}},
            f"models: a name holds ${{MODEL}}, {NOT_EXPANDED}",
        ),
        (
            {"auth": {"keys": [{"keyEnv": "K", "tenant": "${TENANT}"}]}},
            f"auth.keys[0].tenant: the value holds ${{TENANT}}, {NOT_EXPANDED}",
        ),
        (
            {"providers": {"openai": {"apiKeyEnv": "${OPENAI_API_KEY}"}}},
            "provider openai: its apiKeyEnv takes the variable's name as it is, OPENAI_API_KEY, "
            "not ${OPENAI_API_KEY}",
        ),
    ],
)
def test_a_variable_reference_is_refused_naming_its_place(raw: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={"MODEL": "gpt-4o", "HOST": "h", "TENANT": "t"})
    assert str(refused.value).startswith(reason)


def test_a_reference_in_a_key_env_names_the_whole_variable() -> None:
    """A variable's name may hold ``-`` and ``.`` (a Kubernetes Secret's key): the name to
    write is all of it, not the part before the ``-`` a shell reads as a default."""
    with pytest.raises(ConfigError) as refused:
        parse_config({"providers": {"openai": {"apiKeyEnv": "${openai-api-key}"}}}, env={})
    assert str(refused.value) == (
        "provider openai: its apiKeyEnv takes the variable's name as it is, openai-api-key, "
        "not ${openai-api-key}"
    )


@pytest.mark.parametrize("where", ["apiKeyEnv", "baseUrl"])
def test_a_key_pasted_into_a_reference_is_not_quoted(where: str) -> None:
    """The reason names the variable; one that is a key of a shape redaction knows is not."""
    key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
    with pytest.raises(ConfigError) as refused:
        parse_config({"providers": {"openai": {where: f"${{{key}}}"}}}, env={})
    assert key not in str(refused.value) and "${…}" in str(refused.value)


def test_a_redaction_pattern_may_hold_what_looks_like_a_reference() -> None:
    """A pattern is a regular expression, where ``$`` and ``{`` are its own."""
    raw = {
        "context": {"redaction": {"patterns": [r"token=\S+${TOKEN}"]}},
        "agents": {"a": {"context": {"redaction": {"patterns": [r"x${SECRET}"]}}}},
    }
    assert parse_config(raw, env={}).context.redaction.patterns == (r"token=\S+${TOKEN}",)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            {"models": {"gpt-4o ": {"contextLimit": 8000}}},
            "models: the name 'gpt-4o' has a space at an end",
        ),
        ({"agents": {" coder": {}}}, "agents: the name 'coder' has a space at an end"),
    ],
)
def test_a_name_no_request_reaches_as_written_is_refused(raw: dict[str, Any], reason: str) -> None:
    """A request's ``model`` is matched exactly: a name with a space at an end (a template's,
    a paste's) is the agent of no request and a prefix of no model's name."""
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value).startswith(reason)


def test_default_in_another_case_is_taken_and_warned_of() -> None:
    """``Default`` is a name a request or a provider's model may bear (a server's one served
    model): it is an agent and a prefix like any other, not the fallback ``default``, and a
    warning says so in case the fallback was meant."""
    raw = {"agents": {"Default": {"model": "m"}}, "models": {"DEFAULT": {"contextLimit": 8000}}}
    cfg = parse_config(raw, env={})
    assert cfg.agent_for("Default")[0] == "Default"
    assert cfg.agent_for("gpt-4o")[0] == "default"
    assert cfg.model_limits("DEFAULT-7b").context_limit == 8000
    assert config_warnings(cfg, env={}) == [
        "models: 'DEFAULT' is not the fallback default (names are matched case by case): it"
        " is the window of a model whose name starts with DEFAULT only",
        "agents: 'Default' is not the fallback default (names are matched case by case): it"
        " is the agent of a request whose model is Default only",
    ]
