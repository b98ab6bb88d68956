"""proxy/config.py: the agents.json schema, its defaults and the pure loader."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from proxy.config import (
    DEFAULT_OPENAI_BASE_URL,
    AgentConfig,
    Config,
    ConfigError,
    ModelConfig,
    config_warnings,
    load_config,
    parse_config,
)
from proxy.config_context import ContextConfig
from proxy.config_watch import ConfigHolder

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "agents.json"


def write(tmp_path: Path, raw: Any) -> Path:
    path = tmp_path / "agents.json"
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    return path


# defaults


def test_empty_file_gives_design_defaults() -> None:
    cfg = parse_config({}, env={})
    ctx = cfg.context
    assert (ctx.tool_output.max_chars, ctx.tool_output.persist_raw) == (24_000, True)
    assert ctx.tool_output.raw_cap_bytes == 8_388_608
    assert ctx.redaction.enabled and ctx.redaction.patterns == ()
    ev = ctx.eviction
    assert (ev.enabled, ev.at_fraction, ev.keep_recent_rounds) == (True, 0.125, 2)
    assert (ev.clear_at_least, ev.min_result_tokens, ev.exclude_tools) == (2000, 200, ())
    sm = ctx.summarize
    assert (sm.enabled, sm.background, sm.soft_fraction, sm.hard_fraction) == (True, True, 0.6, 0.9)
    assert (sm.keep_recent, sm.reflect_tokens) == (4, 4000)
    # lossless and lossy stages on, opt-in stages off
    assert not ctx.recitation.enabled and not ctx.retrieval.enabled and not ctx.handoff.enabled
    assert ctx.memory_promotion.mode == "off"
    assert (ctx.retrieval.min_score, ctx.retrieval.max_results) == (0.35, 4)
    assert ctx.handoff.at_fraction == 0.9
    assert (cfg.embedding.provider, cfg.embedding.model, cfg.embedding.dimensions) == (
        "builtin",
        "wordllama-l2-256",
        256,
    )
    assert cfg.auth.keys == ()
    assert cfg.model_limits("anything").context_limit == 128_000


def test_missing_path_means_all_defaults() -> None:
    assert load_config(None, env={}) == parse_config({}, env={})


def test_default_agent_always_exists_and_uses_openai() -> None:
    cfg = parse_config({"agents": {"coder": {"model": "gpt-4o"}}}, env={})
    assert set(cfg.agents) == {"coder", "default"}
    assert cfg.agents["default"].provider == "openai"


# providers and OPENAI_BASE_URL


def test_default_provider_reads_openai_base_url() -> None:
    cfg = parse_config({}, env={"OPENAI_BASE_URL": "http://127.0.0.1:9999/v1"})
    openai = cfg.providers["openai"]
    assert openai.base_url == "http://127.0.0.1:9999/v1"
    assert openai.api_key_env == "OPENAI_API_KEY"


def test_default_provider_without_env_is_api_openai_com() -> None:
    cfg = parse_config({}, env={})
    assert cfg.providers["openai"].base_url == DEFAULT_OPENAI_BASE_URL
    assert DEFAULT_OPENAI_BASE_URL == "https://api.openai.com/v1"


def test_explicit_openai_provider_beats_env() -> None:
    raw = {"providers": {"openai": {"baseUrl": "http://file/v1"}}}
    cfg = parse_config(raw, env={"OPENAI_BASE_URL": "http://env/v1"})
    assert cfg.providers["openai"].base_url == "http://file/v1"


def test_agent_naming_unknown_provider_is_rejected() -> None:
    with pytest.raises(ConfigError, match="provider 'vllm' is not in providers"):
        parse_config({"agents": {"x": {"provider": "vllm"}}}, env={})


# camelCase keys, unknown keys


def test_camel_case_keys_map_to_snake_case() -> None:
    raw = {
        "providers": {"local": {"baseUrl": "http://h/v1", "apiKeyEnv": "LOCAL_KEY"}},
        "models": {"m": {"contextLimit": 1000, "reservedOutput": 10}},
        "agents": {"default": {"provider": "local", "fastModel": "tiny"}},
        "context": {
            "toolOutput": {"maxChars": 500, "persistRaw": False, "rawCapBytes": 99},
            "eviction": {"atFraction": 0.25, "keepRecentRounds": 1, "clearAtLeast": 7},
            "summarize": {"softFraction": 0.6, "hardFraction": 0.8, "keepRecent": 2},
            "memoryPromotion": {"mode": "suggest"},
        },
    }
    cfg = parse_config(raw, env={})
    assert cfg.providers["local"].api_key_env == "LOCAL_KEY"
    assert cfg.models["m"] == ModelConfig(context_limit=1000, reserved_output=10)
    assert cfg.agents["default"].fast_model == "tiny"
    ctx = cfg.context
    assert (ctx.tool_output.max_chars, ctx.tool_output.persist_raw) == (500, False)
    assert ctx.tool_output.raw_cap_bytes == 99
    assert (ctx.eviction.at_fraction, ctx.eviction.keep_recent_rounds) == (0.25, 1)
    assert ctx.eviction.clear_at_least == 7
    assert (ctx.summarize.soft_fraction, ctx.summarize.keep_recent) == (0.6, 2)
    assert ctx.memory_promotion.mode == "suggest"


def test_dump_by_alias_round_trips_camel_case() -> None:
    dumped = ContextConfig().model_dump(by_alias=True)
    assert "toolOutput" in dumped and "maxChars" in dumped["toolOutput"]
    assert ContextConfig.model_validate(dumped) == ContextConfig()


@pytest.mark.parametrize(
    "raw",
    [
        {"contxt": {}},
        {"context": {"eviction": {"atFracton": 0.5}}},
        {"providers": {"openai": {"base_url_typo": "x"}}},
        {"models": {"default": {"contextLimit": 1, "limit": 2}}},
    ],
)
def test_unknown_keys_are_rejected(raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="Extra inputs are not permitted"):
        parse_config(raw, env={})


@pytest.mark.parametrize(
    "raw",
    [
        {"context": {"eviction": {"atFraction": 1.5}}},
        {"context": {"summarize": {"softFraction": 0.95, "hardFraction": 0.9}}},
        {"models": {"default": {"contextLimit": 0}}},
        {"context": {"memoryPromotion": {"mode": "always"}}},
    ],
)
def test_out_of_range_values_are_rejected(raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        parse_config(raw, env={})


def test_unknown_key_in_agent_context_override_is_rejected() -> None:
    raw = {"agents": {"a": {"context": {"eviction": {"typo": 1}}}}}
    with pytest.raises(ConfigError, match=r"agents\.a\.context: (.|\n)*typo"):
        parse_config(raw, env={})


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        # each used to be accepted, then failed every chat request with a 500
        (
            {"context": {"redaction": {"patterns": ["(unclosed"]}}},
            r"context\.redaction\.patterns: invalid redaction pattern '\(unclosed'",
        ),
        (
            {"agents": {"a": {"context": {"redaction": {"patterns": ["[a"]}}}}},
            r"agents\.a\.context\.redaction\.patterns",
        ),
        # each used to escape as a TypeError or ValueError: a traceback, no config.rejected
        ({"agents": ["x"]}, "agents: must be an object"),
        ({"providers": "ab"}, "providers: must be an object"),
    ],
)
def test_a_config_that_cannot_work_is_rejected_naming_the_key(
    raw: dict[str, Any], names: str
) -> None:
    with pytest.raises(ConfigError, match=names):
        parse_config(raw, env={})


# per-agent context overrides


def test_agent_context_overrides_key_by_key() -> None:
    raw = {
        "context": {
            "eviction": {"atFraction": 0.4, "keepRecentRounds": 5},
            "toolOutput": {"maxChars": 9000},
        },
        "agents": {"coder": {"context": {"eviction": {"keepRecentRounds": 1}}}},
    }
    cfg = parse_config(raw, env={})
    coder = cfg.context_for("coder")
    # the overridden key changes; its siblings keep the global (not the built-in) value
    assert coder.eviction.keep_recent_rounds == 1
    assert coder.eviction.at_fraction == 0.4
    assert coder.eviction.clear_at_least == 2000
    assert coder.tool_output.max_chars == 9000
    # the global block and other agents are untouched
    assert cfg.context.eviction.keep_recent_rounds == 5
    assert cfg.context_for("default").eviction.keep_recent_rounds == 5


def test_agent_can_disable_one_stage_only() -> None:
    raw = {"agents": {"quiet": {"context": {"summarize": {"enabled": False}}}}}
    cfg = parse_config(raw, env={})
    quiet = cfg.context_for("quiet")
    assert not quiet.summarize.enabled
    assert quiet.summarize.soft_fraction == 0.6
    assert quiet.eviction.enabled
    assert cfg.context_for("default").summarize.enabled


def test_context_for_unknown_agent_is_global() -> None:
    cfg = parse_config({"context": {"eviction": {"atFraction": 0.3}}}, env={})
    assert cfg.context_for("nobody").eviction.at_fraction == 0.3


# model limits: longest prefix, then default


def test_model_limits_longest_prefix_then_default() -> None:
    raw = {
        "models": {
            "gpt-4": {"contextLimit": 8192},
            "gpt-4o": {"contextLimit": 128000},
            "gpt-4o-mini": {"contextLimit": 64000},
            "default": {"contextLimit": 32000},
        }
    }
    cfg = parse_config(raw, env={})
    assert cfg.model_limits("gpt-4o-mini-2024-07-18").context_limit == 64000
    assert cfg.model_limits("gpt-4o-2024-08-06").context_limit == 128000
    assert cfg.model_limits("gpt-4-turbo").context_limit == 8192
    assert cfg.model_limits("llama-3").context_limit == 32000
    assert cfg.model_limits("").context_limit == 32000


def test_model_limits_without_default_entry_uses_builtin() -> None:
    cfg = parse_config({"models": {"small": {"contextLimit": 100}}}, env={})
    assert cfg.model_limits("small-1").context_limit == 100
    assert cfg.model_limits("big").context_limit == 128_000
    assert cfg.model_limits("big").reserved_output == 4096


def test_model_named_default_is_not_a_prefix() -> None:
    cfg = parse_config({"models": {"default": {"contextLimit": 5000}}}, env={})
    assert cfg.model_limits("default-model").context_limit == 5000


# agent selection


def test_model_naming_an_agent_selects_it() -> None:
    raw = {"agents": {"coder": {"model": "gpt-4.1", "fastModel": "gpt-4.1-mini"}}}
    cfg = parse_config(raw, env={})
    name, agent = cfg.agent_for("coder")
    assert name == "coder"
    assert agent.model == "gpt-4.1"
    assert agent.fast_model == "gpt-4.1-mini"


@pytest.mark.parametrize("model", ["gpt-4o", None, "", "code"])
def test_other_models_go_to_default_agent(model: str | None) -> None:
    cfg = parse_config({"agents": {"coder": {}, "default": {"fastModel": "f"}}}, env={})
    name, agent = cfg.agent_for(model)
    assert name == "default"
    assert agent.fast_model == "f"
    assert agent.model is None  # the request's model is forwarded unchanged


def test_agent_for_on_a_config_without_agents() -> None:
    assert Config().agent_for("x") == ("default", AgentConfig())


# loading files


def test_load_config_reports_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.json", env={})


def test_load_config_reports_bad_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(write(tmp_path, "{ not json"), env={})


def test_load_config_reports_a_file_it_cannot_read(tmp_path: Path) -> None:
    # a directory in its place, bytes that are not UTF-8: the reason, naming the file
    with pytest.raises(ConfigError, match=f"cannot read config file {tmp_path}"):
        load_config(tmp_path, env={})
    binary = tmp_path / "agents.json"
    binary.write_bytes(b'{"models": {"\xff": {}}}')
    with pytest.raises(ConfigError, match=f"{binary} is not UTF-8 text"):
        load_config(binary, env={})


def test_load_config_requires_an_object(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="JSON object at the top level"):
        load_config(write(tmp_path, "[1, 2]"), env={})


def test_load_config_reads_a_valid_file(tmp_path: Path) -> None:
    path = write(tmp_path, {"models": {"default": {"contextLimit": 777}}})
    assert load_config(path, env={}).model_limits("m").context_limit == 777


# the shipped file


def test_shipped_config_validates() -> None:
    cfg = load_config(SHIPPED, env={})
    assert cfg.providers["openai"].base_url == DEFAULT_OPENAI_BASE_URL
    assert cfg.providers["openai"].api_key_env == "OPENAI_API_KEY"
    assert cfg.agents["default"].fast_model == "gpt-4o-mini"
    assert cfg.model_limits("gpt-4o-2024-08-06").context_limit == 128000
    # the shipped file is pass-through: no proxy keys
    assert cfg.auth.keys == ()
    assert cfg.context.eviction.enabled and cfg.context.summarize.enabled
    assert not cfg.context.retrieval.enabled


def test_shipped_config_takes_the_provider_from_the_environment() -> None:
    """README and docker-compose.yml point the default provider elsewhere with
    OPENAI_BASE_URL; the shipped file must not pin it."""
    cfg = load_config(SHIPPED, env={"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"})
    assert cfg.providers["openai"].base_url == "http://127.0.0.1:11434/v1"
    assert cfg.providers["openai"].api_key_env == "OPENAI_API_KEY"


def test_shipped_config_holds_no_secrets() -> None:
    text = SHIPPED.read_text()
    assert "sk-" not in text
    raw = json.loads(text)
    assert "auth" not in raw
    for provider in raw.get("providers", {}).values():
        assert set(provider) <= {"baseUrl", "apiKeyEnv", "timeoutSeconds", "connectTimeoutSeconds"}


# what a valid config asks for that will not happen


def test_no_warnings_for_the_defaults_or_the_shipped_file() -> None:
    assert config_warnings(parse_config({}, env={}), env={}) == []
    assert config_warnings(load_config(SHIPPED, env={}), env={}) == []


def test_warnings_name_unset_keys_uncredentialed_providers_and_unbuilt_stages() -> None:
    raw = {
        "providers": {
            "local": {"baseUrl": "http://127.0.0.1:9/v1"},
            "paid": {"baseUrl": "http://127.0.0.1:8/v1", "apiKeyEnv": "PAID_KEY"},
        },
        "agents": {
            "default": {"provider": "paid"},
            "coder": {"provider": "local", "context": {"retrieval": {"enabled": True}}},
        },
        "context": {"memoryPromotion": {"mode": "suggest"}},
        "auth": {
            "keys": [
                {"keyEnv": "TEAM_A_KEY", "tenant": "a"},
                {"keyEnv": "TEAM_B_KEY", "tenant": "b"},
            ]
        },
    }
    env = {"TEAM_A_KEY": "k"}
    assert config_warnings(parse_config(raw, env), env) == [
        "auth key of tenant 'b': $TEAM_B_KEY is unset, no request can use it",
        "provider 'local' will be called without credentials (proxy keys are never "
        "forwarded): give it an apiKeyEnv",
        "provider 'paid' will be called without credentials (proxy keys are never "
        "forwarded): set $PAID_KEY",
    ]
    # pass-through mode forwards the client's own token: no credentials warning
    passthrough = {k: v for k, v in raw.items() if k not in ("auth", "context")}
    passthrough["agents"] = {"default": {"provider": "paid"}}
    assert config_warnings(parse_config(passthrough, env), env) == []
    metrics = {"auth": {"metricsKeyEnv": "SCRAPE_KEY"}}
    assert config_warnings(parse_config(metrics, env), env) == [
        "auth.metricsKeyEnv: $SCRAPE_KEY is unset, so /metrics answers without a key"
    ]
    assert config_warnings(parse_config(metrics, env), {"SCRAPE_KEY": "k"}) == []


def test_the_holder_logs_the_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEAM_A_KEY", raising=False)
    path = write(tmp_path, {"auth": {"keys": [{"keyEnv": "TEAM_A_KEY", "tenant": "a"}]}})
    with caplog.at_level(logging.WARNING, logger="cascade.config"):
        ConfigHolder(load_config(path, env={}), path)
    assert "$TEAM_A_KEY is unset" in caplog.text


def test_built_stages_are_not_warned_about() -> None:
    raw = {
        "context": {
            "recitation": {"enabled": True},
            "handoff": {"enabled": True},
            "summarize": {"ledgerCap": 10},
        }
    }
    cfg = parse_config(raw, {})
    assert config_warnings(cfg, {}) == []
    assert cfg.context.summarize.ledger_cap == 10
    assert cfg.context_for("default").handoff.at_fraction == 0.9
