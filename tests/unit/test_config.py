"""proxy/config.py: the agents.json schema, its defaults, overrides and lookups."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import (
    DEFAULT_OPENAI_BASE_URL,
    AgentConfig,
    Config,
    ConfigError,
    ModelConfig,
    load_config,
    parse_config,
)
from proxy.config_context import ContextConfig

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


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"agents": {"x": {"provider": "vllm"}}}, "agents.x.provider 'vllm' is not in providers"),
        (
            {"context": {"summarize": {"softFraction": 0.95, "hardFraction": 0.9}}},
            # the block was named twice: "context.summarize: summarize.softFraction …"
            "context.summarize: softFraction must not exceed hardFraction",
        ),
        (
            {"agents": {"a": {"context": {"summarize": {"softFraction": 0.95}}}}},
            "agents.a.context: summarize: softFraction must not exceed hardFraction",
        ),
        # each used to be accepted, then every request without max_tokens was a 400
        (
            {"models": {"gpt-x": {"contextLimit": 128000, "reservedOutput": 130000}}},
            "models.gpt-x.reservedOutput (130000) must be less than its contextLimit (128000)",
        ),
    ],
)
def test_a_check_across_keys_reads_as_its_own_sentence(raw: dict[str, Any], reason: str) -> None:
    # pydantic words a validator's ValueError "Value error, ..." and a whole-file one's place
    # as "value": what the operator reads at start and in config.rejected
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value) == reason


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


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        # each was read as a number: a window of 1 token (every request a 400), one kept
        # message, a 1 s timeout
        ({"models": {"gpt-4o": {"contextLimit": True}}}, r"models\.gpt-4o\.contextLimit"),
        ({"context": {"summarize": {"keepRecent": True}}}, r"summarize\.keepRecent"),
        ({"providers": {"openai": {"timeoutSeconds": True}}}, r"openai\.timeoutSeconds"),
        ({"agents": {"a": {"context": {"eviction": {"keepRecentRounds": False}}}}}, r"agents\.a"),
        # each was read as what the text might mean
        ({"providers": {"openai": {"verifyTls": "no"}}}, r"openai\.verifyTls"),
        ({"context": {"retrieval": {"enabled": 1}}}, r"retrieval\.enabled"),
        ({"context": {"toolOutput": {"maxChars": "24000"}}}, r"toolOutput\.maxChars"),
        ({"agents": {"a": {"context": {"handoff": {"enabled": "off"}}}}}, r"agents\.a"),
    ],
)
def test_a_value_of_another_json_type_is_rejected(raw: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        parse_config(raw, env={})


def test_a_whole_number_may_be_written_for_a_fraction_or_a_timeout() -> None:
    raw = {
        "providers": {"openai": {"timeoutSeconds": 30}},
        "context": {"handoff": {"atFraction": 1}},
    }
    cfg = parse_config(raw, env={})
    assert cfg.providers["openai"].timeout_seconds == 30.0
    assert cfg.context.handoff.at_fraction == 1.0


def test_unknown_key_in_agent_context_override_is_rejected() -> None:
    raw = {"agents": {"a": {"context": {"eviction": {"typo": 1}}}}}
    with pytest.raises(ConfigError, match=r"agents\.a\.context: (.|\n)*typo"):
        parse_config(raw, env={})


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        # each used to be accepted, then failed every chat request with a 500
        (
            {"context": {"redaction": {"patterns": ["x", "(unclosed"]}}},
            r"context\.redaction\.patterns\[1\]: not a regular expression \(missing \)",
        ),
        (
            {"agents": {"a": {"context": {"redaction": {"patterns": ["[a"]}}}}},
            r"agents\.a\.context\.redaction\.patterns\[0\]",
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


def test_a_refused_redaction_pattern_is_named_by_its_place_not_its_text() -> None:
    """A pattern may spell the very secret it scrubs (an internal token, a password), and
    the reason goes to the log and, without proxy keys, to every open event stream."""
    secret = "sk-live-7Hq2x9PzR4"
    raw = {"agents": {"a": {"context": {"redaction": {"patterns": [f"({secret}"]}}}}}
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, env={})
    assert "7Hq2x9PzR4" not in str(caught.value)
    assert "agents.a.context.redaction.patterns[0]" in str(caught.value)


@pytest.mark.parametrize("pattern", ["", "x*", "token|", r"\b", "(?=sk-)", "^"])
def test_a_redaction_pattern_that_can_match_nothing_is_refused(pattern: str) -> None:
    """A match of no characters is replaced too: such a pattern wrote [REDACTED] between
    every character (or before each word) of every message sent and stored."""
    raw = {"agents": {"a": {"context": {"redaction": {"patterns": ["sk-[a-z]+", pattern]}}}}}
    with pytest.raises(ConfigError, match=r"agents\.a\.context\.redaction\.patterns\[1\]: "):
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


def test_a_small_window_with_the_default_reserved_output_still_loads() -> None:
    """A fast model's small window, for summaries that always send max_tokens."""
    cfg = parse_config({"models": {"tiny": {"contextLimit": 4096}}}, env={})
    assert cfg.model_limits("tiny").context_limit == 4096


def test_model_limits_without_default_entry_uses_builtin() -> None:
    cfg = parse_config({"models": {"small": {"contextLimit": 5000}}}, env={})
    assert cfg.model_limits("small-1").context_limit == 5000
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


# proxy keys: one entry per key


def _keys(*entries: tuple[str, str]) -> dict[str, Any]:
    return {"auth": {"keys": [{"keyEnv": env, "tenant": tenant} for env, tenant in entries]}}


@pytest.mark.parametrize(
    "raw",
    [
        _keys(("K_A", "team-a"), ("K_A", "team-b")),  # one key, two tenants
        _keys(("K_A", "team-a"), ("K_B", "team-b"), ("K_A", "team-a")),  # listed twice
    ],
)
def test_a_key_variable_listed_twice_is_refused_naming_both(raw: dict[str, Any]) -> None:
    """Regression: accepted, and a request with that key was only ever the first entry's
    (its tenant, its agents): the later entry did nothing."""
    last = len(raw["auth"]["keys"]) - 1
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value).startswith(f"auth.keys[{last}].keyEnv: $K_A is auth.keys[0]'s")


def test_two_key_variables_holding_one_key_are_refused_without_the_key() -> None:
    raw = _keys(("K_A", "team-a"), ("K_B", "team-b"))
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={"K_A": "sk-same", "K_B": " sk-same\n"})  # as the gate strips
    reason = str(refused.value)
    assert reason.startswith("auth.keys[1].keyEnv: $K_B holds the key $K_A (auth.keys[0])")
    assert "sk-same" not in reason
    # different keys, or variables unset (no request can use those), are valid
    assert parse_config(raw, env={"K_A": "sk-1", "K_B": "sk-2"}).auth.keys
    assert parse_config(raw, env={"K_A": "", "K_B": " "}).auth.keys


def test_a_metrics_key_variable_that_is_a_proxy_keys_is_refused_naming_both() -> None:
    """Regression: accepted, and that proxy key (its tenant's every client) opened /metrics,
    which counts every tenant's traffic and which the metrics key is meant to keep to the
    scraper."""
    raw = _keys(("K_A", "team-a"), ("K_B", "team-b"))
    raw["auth"]["metricsKeyEnv"] = "K_B"
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={})
    assert str(refused.value).startswith("auth.metricsKeyEnv: $K_B is auth.keys[1]'s keyEnv")


def test_a_metrics_key_holding_a_proxy_key_is_refused_without_the_key() -> None:
    raw = _keys(("K_A", "team-a"))
    raw["auth"]["metricsKeyEnv"] = "K_METRICS"
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env={"K_A": "sk-same", "K_METRICS": " sk-same\n"})
    reason = str(refused.value)
    assert reason.startswith("auth.metricsKeyEnv: $K_METRICS holds the key $K_A (auth.keys[0])")
    assert "sk-same" not in reason
    assert parse_config(raw, env={"K_A": "sk-1", "K_METRICS": "sk-2"}).auth.metrics_key_env
    assert parse_config(raw, env={"K_A": "", "K_METRICS": ""}).auth.metrics_key_env
