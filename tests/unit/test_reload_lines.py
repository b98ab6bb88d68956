"""What a reload logs, as the log writes it (every line goes through the secret scrub,
``proxy.logs.masked``): a refusal's reason whole, so the operator reads why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from proxy import config_report
from proxy.cascade.types import CONFIG_REJECTED, CONFIG_RELOADED
from proxy.config import load_config
from proxy.config_watch import ConfigHolder
from proxy.logs import masked


def _holder(tmp_path: Path) -> ConfigHolder:
    path = tmp_path / "agents.json"
    path.write_text("{}")
    return ConfigHolder(load_config(path, {}), path)


@pytest.mark.parametrize(
    ("key_env", "why"),
    [
        ("sk-proj-1a2b3c4d5e6f7a8b9c0d", "not an environment variable's name"),
        ("", "empty; name the variable"),
        ("${OPENAI_API_KEY}", "takes the variable's name as it is"),
    ],
)
def test_a_refused_api_key_env_is_logged_with_its_reason_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, key_env: str, why: str
) -> None:
    """``providers.p.apiKeyEnv: not an environment variable's name`` read to the scrub as a
    key and its value: the line said ``apiKeyEnv: [REDACTED] an environment variable's
    name``, the opposite of the reason."""
    holder = _holder(tmp_path)
    provider = {"baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": key_env}
    holder.path.write_text(json.dumps({"providers": {"p": provider}}))  # type: ignore[union-attr]
    with caplog.at_level(logging.WARNING, logger="cascade.config"):
        assert holder.reload({})[0] == CONFIG_REJECTED
    [line] = [masked(r.getMessage()) for r in caplog.records]
    assert f"providers.p.apiKeyEnv: {why}" in line
    assert "sk-proj-1a2b3c4d5e6f7a8b9c0d" not in line


@pytest.mark.parametrize(
    ("line", "logged"),
    [
        ("apiKeyEnv: hunter2abc", "apiKeyEnv: [REDACTED]"),
        ('{"apiKeyEnv": "hunter2abc"}', '{"apiKeyEnv": "[REDACTED]"}'),
        ("SECRET_ENV=hunter2abc", "SECRET_ENV=[REDACTED]"),
        ("xproviders.p.apiKeyEnv: hunter2abc", "xproviders.p.apiKeyEnv: [REDACTED]"),
        (
            "providers.p.apiKeyEnv: sk-proj-1a2b3c4d5e6f7a8b9c0d1e2f",
            "providers.p.apiKeyEnv: [REDACTED]",
        ),
        ("providers.p.apiKeyEnv: x; password=hunter2abc", "providers.p.apiKeyEnv: x; password=***"),
    ],
)
def test_only_a_refusal_naming_a_providers_api_key_env_keeps_its_reason(
    line: str, logged: str
) -> None:
    """The reason after a refusal's ``providers.<name>.apiKeyEnv:`` is kept, and nothing
    else: a key ending in ``env`` elsewhere in a line (a provider's body echoing a request)
    is a secret's key, and a secret's shape is masked after that path too."""
    assert masked(line) == logged


def test_a_reload_names_each_setting_it_changed_and_no_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The line said ``config … reloaded`` and nothing of what: an operator could not tell a
    save that moved a provider or removed a key from one that changed nothing."""
    env = {"K_A": "proxy-key-a-0f3e", "K_B": "proxy-key-b-77c1"}
    keys = [{"keyEnv": "K_A", "tenant": "a"}, {"keyEnv": "K_B", "tenant": "b"}]
    provider = {"baseUrl": "http://alice:url-pass-5521@127.0.0.1:9/v1"}
    first = {"providers": {"p": provider}, "agents": {"default": {"provider": "p"}}}
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({**first, "auth": {"keys": keys}}))
    holder = ConfigHolder(load_config(path, env), path)
    moved = {"baseUrl": "http://127.0.0.1:10/v1", "verifyTls": False}
    path.write_text(
        json.dumps(
            {
                "providers": {"p": moved},
                "agents": {
                    "default": {"provider": "p", "context": {"eviction": {"atFraction": 0.5}}}
                },
                "models": {"gpt-4o": {"contextLimit": 64000}},
                "auth": {"keys": keys[:1]},
            }
        )
    )
    with caplog.at_level(logging.INFO, logger="cascade.config"):
        holder.reload(env)
        holder.reload(env)  # the same file again: said so
    said = [masked(r.getMessage()) for r in caplog.records if "reloaded" in r.getMessage()]
    assert said[0] == (
        f"config {path} reloaded: changed providers.p.baseUrl, providers.p.verifyTls; "
        "added models.gpt-4o, agents.default.context.eviction; removed auth.keys[$K_B]"
    )
    assert said[1] == f"config {path} reloaded: no setting changed"
    for secret in ("url-pass-5521", "127.0.0.1:10", "64000", "0.5", *env.values()):
        assert secret not in said[0]


def test_a_reload_whose_changes_cannot_be_listed_is_still_in_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line is written once the new config is in force: a failure listing the changes
    must not turn it into "reload failed, keeping the previous one" without its event."""
    holder = _holder(tmp_path)
    monkeypatch.setattr(config_report, "_tree", lambda cfg: 1 / 0)
    holder.path.write_text('{"models": {"m": {"contextLimit": 9000}}}')  # type: ignore[union-attr]
    assert holder.reload({})[0] == CONFIG_RELOADED
    assert holder.current.models["m"].context_limit == 9000


def test_a_reload_of_thousands_of_settings_names_a_few_and_counts_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file generated anew (a model list of thousands) wrote every path on one line."""
    holder = _holder(tmp_path)
    models = {f"m{i}": {"contextLimit": 8000 + i} for i in range(3000)}
    holder.path.write_text(json.dumps({"models": models}))  # type: ignore[union-attr]
    with caplog.at_level(logging.INFO, logger="cascade.config"):
        assert holder.reload({})[0] == CONFIG_RELOADED
    [line] = [r.getMessage() for r in caplog.records if "reloaded" in r.getMessage()]
    assert line.endswith(
        "reloaded: added models.m0, models.m1, models.m2, models.m3, models.m4, models.m5, "
        "models.m6, models.m7, models.m8, models.m9 and 2990 more"
    )
