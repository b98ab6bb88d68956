"""config/agents.json's keys: camelCase is the documented spelling, and the snake_case of
the same key is read the same way wherever a key is read, an agent's ``context`` too; a name
given as an empty string, where empty means nothing, is refused with what leaving it out
does."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import ConfigError, parse_config


def test_an_agents_context_reads_snake_case_keys_as_the_top_level_does() -> None:
    """The top level took ``tool_output`` while ``agents.<name>.context`` refused it; and a
    snake_case key there merges key by key over the top-level block, as its camelCase does."""
    raw = {
        "context": {"tool_output": {"compact": False}, "eviction": {"atFraction": 0.4}},
        "agents": {
            "a": {"context": {"tool_output": {"max_chars": 900}}},
            "b": {"context": {"eviction": {"keep_recent_rounds": 1}}},
        },
    }
    cfg = parse_config(raw, env={})
    a, b = cfg.context_for("a"), cfg.context_for("b")
    assert (a.tool_output.max_chars, a.tool_output.compact) == (900, False)
    assert (b.eviction.keep_recent_rounds, b.eviction.at_fraction) == (1, 0.4)
    assert not b.tool_output.compact


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            {"context": {"toolOutput": {"maxChars": 300, "max_chars": 500}}},
            "context.toolOutput.maxChars: given twice, as maxChars and max_chars; keep one",
        ),
        (
            {"context": {"toolOutput": {}, "tool_output": {}}},
            "context.toolOutput: given twice, as toolOutput and tool_output; keep one",
        ),
        (
            {"agents": {"a": {"context": {"tool_output": {"maxChars": 1, "max_chars": 2}}}}},
            "agents.a.context.toolOutput.maxChars: given twice, as maxChars and max_chars; "
            "keep one",
        ),
    ],
)
def test_one_key_in_both_spellings_is_refused_naming_both(raw: dict[str, Any], reason: str) -> None:
    """JSON keeps both, and which would win is nowhere written: refused, the same way in
    each ``context``."""
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value) == reason


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            {"providers": {"p": {"baseUrl": "http://h/v1", "base_url": "http://g/v1"}}},
            "providers.p.baseUrl: given twice, as baseUrl and base_url; keep one",
        ),
        (
            {"models": {"m": {"context_limit": 9000, "contextLimit": 8000}}},
            "models.m.contextLimit: given twice, as contextLimit and context_limit; keep one",
        ),
        (
            {"agents": {"a": {"fastModel": "f", "fast_model": "g"}}},
            "agents.a.fastModel: given twice, as fastModel and fast_model; keep one",
        ),
        (
            {"embedding": {"batchSize": 8, "batch_size": 16}},
            "embedding.batchSize: given twice, as batchSize and batch_size; keep one",
        ),
        (
            {"auth": {"keys": [{"keyEnv": "K", "key_env": "L", "tenant": "t"}]}},
            "auth.keys[0].keyEnv: given twice, as keyEnv and key_env; keep one",
        ),
        (
            {"auth": {"metricsKeyEnv": "M", "metrics_key_env": "N"}},
            "auth.metricsKeyEnv: given twice, as metricsKeyEnv and metrics_key_env; keep one",
        ),
    ],
)
def test_one_key_in_both_spellings_outside_context_is_refused_naming_it(
    raw: dict[str, Any], reason: str
) -> None:
    """The schema said only "Extra inputs are not permitted" (the second spelling, once the
    first filled the field): the key is named as ``context``'s is."""
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value) == reason


def test_snake_case_keys_outside_context_are_still_read() -> None:
    raw = {
        "providers": {"p": {"base_url": "http://h/v1", "api_key_env": "P_KEY"}},
        "auth": {"keys": [{"key_env": "K", "tenant": "t"}], "metrics_key_env": "M"},
        "agents": {"a": {"provider": "p", "fast_model": "f"}},
    }
    cfg = parse_config(raw, env={})
    assert (cfg.providers["p"].base_url, cfg.providers["p"].api_key_env) == ("http://h/v1", "P_KEY")
    assert (cfg.auth.keys[0].key_env, cfg.auth.metrics_key_env) == ("K", "M")
    assert cfg.agents["a"].fast_model == "f"


# empty strings where empty means nothing


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            {"providers": {"p": {"baseUrl": "http://h/v1", "caFile": ""}}},
            "providers.p.caFile: empty; name a PEM bundle, or leave the key out (or null) "
            "for the default CAs",
        ),
        (
            {"providers": {"p": {"baseUrl": "http://h/v1", "apiKeyEnv": " "}}},
            "provider p: its apiKeyEnv is empty; name the variable holding the provider's key, or "
            "leave the key out (or null) to forward the client's token",
        ),
        (
            {"agents": {"a": {"model": ""}}},
            "agents.a.model: empty; name the model sent upstream, or leave the key out (or "
            "null) to send the request's",
        ),
        (
            {"agents": {"a": {"fastModel": ""}}},
            "agents.a.fastModel: empty; name the model that writes summaries, or leave the key "
            "out (or null) to use the request's",
        ),
        (
            {
                "providers": {"e": {"baseUrl": "http://h/v1"}},
                "embedding": {"provider": "e", "model": ""},
            },
            "embedding.model: empty; name the provider's embedding model",
        ),
        (
            {"auth": {"metricsKeyEnv": ""}},
            "auth.metricsKeyEnv: empty; name the variable holding the scraper's key, or leave "
            "the key out (or null)",
        ),
    ],
)
def test_an_empty_string_where_empty_means_nothing_is_refused(
    raw: dict[str, Any], reason: str
) -> None:
    """Each was read as if the key were left out (``caFile: ""`` trusted the default CAs, a
    ``model`` of ``""`` sent the request's): a value written but ignored, without a word."""
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value) == reason


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"providers": {"p": {"baseUrl": ""}}}, "providers.p.baseUrl: not an http(s) URL"),
        ({"agents": {"a": {"provider": ""}}}, "agents.a.provider '' is not in providers"),
        ({"embedding": {"provider": ""}}, "embedding.provider '' is neither 'builtin'"),
        ({"auth": {"keys": [{"keyEnv": "", "tenant": "t"}]}}, r"auth.keys.0.keyEnv: String"),
        ({"auth": {"keys": [{"keyEnv": "K", "tenant": ""}]}}, r"auth.keys.0.tenant: String"),
    ],
)
def test_the_other_empty_names_were_refused_already(raw: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value).startswith(reason), refused.value


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"context": {"observations": {"userPrefixes": [""]}}}, "context"),
        (
            {"agents": {"a": {"context": {"observations": {"userPrefixes": ["Obs:", " "]}}}}},
            "agents.a.context",
        ),
    ],
)
def test_an_empty_observation_prefix_is_refused(raw: dict[str, Any], where: str) -> None:
    """Every user message starts with the empty prefix (and a blank one matches nothing once
    the message's leading spaces are dropped): refused at load, naming the entry, rather
    than read as one of the ways a prefix can match."""
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    i = 0 if where == "context" else 1
    assert str(refused.value).startswith(f"{where}.observations.userPrefixes[{i}]: empty;")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            {"models": {"": {"contextLimit": 1000}, "default": {"contextLimit": 64000}}},
            "models: an empty name is a prefix of every model, ahead of default; name a "
            "model prefix, or use default",
        ),
        (
            {"providers": {" ": {"baseUrl": "http://h/v1"}}},
            "providers: an empty name; name the provider (agents name it by its provider)",
        ),
        (
            {"auth": {"keys": [{"keyEnv": "K", "tenant": "  "}]}},
            "auth.keys[0].tenant: empty; name the tenant the key acts as",
        ),
    ],
)
def test_an_empty_model_or_provider_name_is_refused(raw: dict[str, Any], reason: str) -> None:
    """An empty ``models`` entry (a template filled from an unset variable) matched every
    model as its longest prefix: its window was every model's, ``default`` ignored."""
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value) == reason


@pytest.mark.parametrize("key", ["resolved", "Resolved"])
def test_the_field_the_loader_fills_is_no_key_of_the_file(key: str) -> None:
    """``Config.resolved`` (each agent's merged ``context``) is computed at load: a file
    naming it was valid and its value dropped without a word, where any other unknown key
    is refused, as README Configuration says."""
    with pytest.raises(ConfigError) as refused:
        parse_config({key: {"default": {"toolOutput": {"maxChars": 500}}}}, env={})
    assert str(refused.value) == f"{key}: Extra inputs are not permitted"


def test_the_loaders_field_is_refused_beside_the_files_other_faults() -> None:
    """Refused by the schema as any unknown key is, so one line names every fault of the
    file: a check of its own ahead of the schema named ``resolved`` alone, the typo beside it
    left for the next try."""
    raw = {"resolved": {}, "context": {"eviction": {"atFraction": "x"}}}
    with pytest.raises(ConfigError) as refused:
        parse_config({"colour": 1, "resolved": {}}, env={})
    with pytest.raises(ConfigError) as typos:
        parse_config({"colour": 1, "shade": {}}, env={})
    assert str(refused.value) == str(typos.value).replace("shade", "resolved")
    with pytest.raises(ConfigError) as both:
        parse_config(raw, env={})
    assert "resolved: Extra inputs are not permitted" in str(both.value)
    assert "context.eviction.atFraction" in str(both.value)


def test_a_tenant_holding_a_nul_is_refused_naming_the_key() -> None:
    """PostgreSQL's text holds no NUL, so every request of such a key failed as it stored
    its session (``CharacterNotInRepertoireError``): the config says so instead."""
    with pytest.raises(ConfigError, match=r"auth\.keys\[0\]\.tenant: .*NUL"):
        parse_config({"auth": {"keys": [{"keyEnv": "K", "tenant": "a\x00b"}]}}, env={"K": "k"})


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            {"providers": {"p": {"baseUrl": "http://h/v1", "timeoutSecond": 5}}},
            "providers.p.timeoutSecond: Extra inputs are not permitted; did you mean "
            "timeoutSeconds?",
        ),
        (
            {"agents": {"a": {"context": {"eviction": {"keepRecentRound": 1}}}}},
            "agents.a.context: eviction.keepRecentRound: Extra inputs are not permitted; did "
            "you mean keepRecentRounds?",
        ),
        (
            {"context": {"sumarize": {}}},
            "context.sumarize: Extra inputs are not permitted; did you mean summarize?",
        ),
        ({"bogus": 1}, "bogus: Extra inputs are not permitted"),
    ],
)
def test_an_unknown_key_is_named_with_the_key_it_is_closest_to(
    raw: dict[str, Any], reason: str
) -> None:
    """The schema said only "Extra inputs are not permitted": a typo is named with the key
    it meant, as a misspelt ``CASCADE_*`` variable is; one close to none stays as it was."""
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value) == reason
