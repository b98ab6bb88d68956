"""proxy/config.py's pure loader: the errors a file gives, the shipped config/agents.json, and
the warnings a valid config gets for what will not happen."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from proxy.config import (
    DEFAULT_OPENAI_BASE_URL,
    ConfigError,
    config_warnings,
    load_config,
    parse_config,
)
from proxy.config_watch import ConfigHolder

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "agents.json"


def write(tmp_path: Path, raw: Any) -> Path:
    path = tmp_path / "agents.json"
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    return path


# loading files


def test_load_config_reports_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.json", env={})


def test_load_config_reports_bad_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(write(tmp_path, "{ not json"), env={})


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            '{"context": {"eviction": {"atFraction": 0.5}, "eviction": {"enabled": false}}}',
            "eviction",
        ),
        ('{"providers": {"p": {"baseUrl": "http://a/v1", "baseUrl": "http://b/v1"}}}', "baseUrl"),
    ],
)
def test_load_config_refuses_a_key_written_twice(tmp_path: Path, text: str, key: str) -> None:
    """JSON keeps the last of two equal keys, so the first would be ignored without a word."""
    with pytest.raises(ConfigError, match=f"the key '{key}' appears twice"):
        load_config(write(tmp_path, text), env={})


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"providers": {"openai": {"timeoutSeconds": Infinity}}}', r"openai\.timeoutSeconds"),
        ('{"providers": {"openai": {"connectTimeoutSeconds": 1e999}}}', "connectTimeoutSeconds"),
        ('{"context": {"retrieval": {"minScore": NaN}}}', r"retrieval\.minScore"),
        ('{"context": {"toolOutput": {"compactMinSaving": NaN}}}', "compactMinSaving"),
    ],
)
def test_load_config_refuses_a_number_that_is_not_finite(
    tmp_path: Path, text: str, where: str
) -> None:
    """Python's JSON reader takes ``Infinity`` and ``NaN`` (no JSON) and reads ``1e999`` as
    infinity: each was accepted, a provider wait without end or a comparison always false."""
    with pytest.raises(ConfigError, match=where):
        load_config(write(tmp_path, text), env={})


def test_load_config_reports_a_file_it_cannot_read(tmp_path: Path) -> None:
    # a directory in its place, bytes that are not UTF-8: the reason, naming the file
    with pytest.raises(ConfigError, match=f"cannot read config file {tmp_path}"):
        load_config(tmp_path, env={})
    binary = tmp_path / "agents.json"
    binary.write_bytes(b'{"models": {"\xff": {}}}')
    with pytest.raises(ConfigError, match=f"{binary} is not UTF-8 text"):
        load_config(binary, env={})


@pytest.mark.parametrize(
    "value", ["[" * 10_000 + "]" * 10_000, "9" * 5000], ids=["nested-10000-levels", "5000-digits"]
)
def test_load_config_refuses_json_no_parser_can_hold(tmp_path: Path, value: str) -> None:
    """A nesting past Python's recursion limit (a ``RecursionError``) or an integer past its
    digit limit (a ``ValueError`` that is no ``JSONDecodeError``) is the file's fault: the
    ``ConfigError`` naming it, not a traceback at start or a failed reload."""
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_config(write(tmp_path, f'{{"models": {{"m": {{"contextLimit": {value}}}}}}}'), env={})


def test_load_config_requires_an_object(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="JSON object at the top level"):
        load_config(write(tmp_path, "[1, 2]"), env={})


def test_load_config_reads_a_valid_file(tmp_path: Path) -> None:
    path = write(tmp_path, {"models": {"default": {"contextLimit": 7777}}})
    assert load_config(path, env={}).model_limits("m").context_limit == 7777


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


def test_a_models_entry_that_drops_what_default_sets_is_warned_of() -> None:
    """An entry is the whole of its models' settings (README, Decisions): one that sets only
    ``systemMessages`` beside a ``default`` of a larger window gets the built-in window, which
    nothing said. What ``default`` sets to the built-in value, or an entry sets itself, is
    no surprise."""
    raw = {
        "models": {
            "default": {"contextLimit": 200000, "reservedOutput": 4096},
            "o1-mini": {"systemMessages": False},
            "gpt-4o": {"contextLimit": 128000, "reservedOutput": 8000},
        }
    }
    cfg = parse_config(raw, env={})
    assert cfg.model_limits("o1-mini-2024").context_limit == 128000  # not default's 200000
    assert config_warnings(cfg, env={}) == [
        "models.o1-mini: sets no contextLimit, so its models get the built-in 128000, not "
        "models.default's 200000 (an entry does not inherit from default); set it in the "
        "entry if that is not what you meant"
    ]
    same = {"models": {"default": {"contextLimit": 128000}, "o1": {"systemMessages": False}}}
    assert config_warnings(parse_config(same, env={}), env={}) == []


def test_an_entry_that_drops_several_of_defaults_fields_is_one_line_in_the_configs_words() -> None:
    """Said again at each reload, a line a field made a screenful of a config of a few
    entries; and ``None``/``False`` are no words of a JSON file."""
    raw = {
        "models": {
            "default": {"contextLimit": 32000, "reservedOutput": 2000, "systemMessages": False},
            "gpt-4o": {"reservedOutput": 4000},
        }
    }
    assert config_warnings(parse_config(raw, env={}), env={}) == [
        "models.gpt-4o: sets no contextLimit, systemMessages, so its models get the built-in "
        "128000, unset (by the model's name), not models.default's 32000, false (an entry does "
        "not inherit from default); set them in the entry if that is not what you meant"
    ]


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


def test_a_key_variable_of_only_blanks_is_warned_about_as_no_key() -> None:
    """The gate, the banner and the provider calls strip a key (an empty secrets file leaves
    its newline): a variable of blanks holds none, and the warnings say so as for an unset
    one, where they said nothing."""
    raw = {
        "providers": {"paid": {"baseUrl": "http://127.0.0.1:8/v1", "apiKeyEnv": "PAID_KEY"}},
        "agents": {"default": {"provider": "paid"}},
        "auth": {"keys": [{"keyEnv": "TEAM_A_KEY", "tenant": "a"}], "metricsKeyEnv": "SCRAPE"},
    }
    env = {"TEAM_A_KEY": "\n", "PAID_KEY": " ", "SCRAPE": "\t\n"}
    assert config_warnings(parse_config(raw, env), env) == [
        "auth key of tenant 'a': $TEAM_A_KEY is blank, no request can use it",
        "auth.metricsKeyEnv: $SCRAPE is blank, so /metrics answers with a proxy key only",
        "provider 'paid' will be called without credentials (proxy keys are never "
        "forwarded): set $PAID_KEY",
    ]


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


def test_a_file_saved_with_a_utf8_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows tools write one (PowerShell 5's ``Out-File -Encoding utf8``, older Notepad);
    JSON readers may ignore it (RFC 8259), and the watcher's own parse check did, so the
    save passed for complete and was then refused as "Unexpected UTF-8 BOM"."""
    path = tmp_path / "agents.json"
    path.write_bytes(
        b"\xef\xbb\xbf" + json.dumps({"models": {"m": {"contextLimit": 9000}}}).encode()
    )
    assert load_config(path).model_limits("m").context_limit == 9000
