"""What a reload logs, as the log writes it (every line goes through the secret scrub,
``proxy.logs.masked``): a refusal's reason whole, so the operator reads why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from proxy import config_report
from proxy.cascade.redaction import REDACTED
from proxy.cascade.types import CONFIG_REJECTED, CONFIG_RELOADED
from proxy.config import load_config
from proxy.config_watch import ConfigHolder
from proxy.logs import JsonFormatter, TextFormatter, masked


def _holder(tmp_path: Path) -> ConfigHolder:
    path = tmp_path / "agents.json"
    path.write_text("{}")
    return ConfigHolder(load_config(path, {}), path)


def _written(record: logging.LogRecord, fmt: str) -> str:
    """The record's message as the log writes it in ``fmt`` (through the secret scrub)."""
    if fmt == "json":
        return str(json.loads(JsonFormatter().format(record))["message"])
    return TextFormatter().format(record)


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize(
    ("key_env", "auth", "why"),
    [
        ("sk-proj-1a2b3c4d5e6f7a8b9c0d", {}, "is not an environment variable's name"),
        ("", {}, "is empty; name the variable holding the provider's key"),
        ("${OPENAI_API_KEY}", {}, "takes the variable's name as it is, OPENAI_API_KEY"),
        ("K_A", {"keys": [{"keyEnv": "K_A", "tenant": "a"}]}, "$K_A is auth.keys[0]'s keyEnv"),
        (5, {}, "is refused: Input should be a valid string"),
    ],
)
def test_a_refused_api_key_env_is_logged_with_its_reason_whole(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    key_env: object,
    auth: dict[str, object],
    why: str,
    fmt: str,
) -> None:
    """``providers.p.apiKeyEnv: not an environment variable's name`` read to the scrub as a
    key and its value: the line said ``apiKeyEnv: [REDACTED] an environment variable's
    name``, the opposite of the reason. The refusal names the provider, then its key."""
    holder = _holder(tmp_path)
    provider = {"baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": key_env}
    raw = {"providers": {"p": provider}, "agents": {"default": {"provider": "p"}}, "auth": auth}
    holder.path.write_text(json.dumps(raw))  # type: ignore[union-attr]
    with caplog.at_level(logging.WARNING, logger="cascade.config"):
        assert holder.reload({})[0] == CONFIG_REJECTED
    [line] = [_written(r, fmt) for r in caplog.records]
    assert f"provider p: its apiKeyEnv {why}" in line
    assert REDACTED not in line
    assert "sk-proj-1a2b3c4d5e6f7a8b9c0d" not in line


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_reload_of_a_providers_api_key_env_is_logged_readable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fmt: str
) -> None:
    """The reload line names the setting by its path, which no pattern reads as a key."""
    holder = _holder(tmp_path)
    provider = {"baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": "P_KEY"}
    holder.path.write_text(json.dumps({"providers": {"p": provider}}))  # type: ignore[union-attr]
    with caplog.at_level(logging.INFO, logger="cascade.config"):
        assert holder.reload({})[0] == CONFIG_RELOADED
    [line] = [_written(r, fmt) for r in caplog.records if "reloaded" in r.getMessage()]
    assert line.endswith(f"config {holder.path} reloaded: added providers.p")


@pytest.mark.parametrize(
    ("line", "logged"),
    [
        ("apiKeyEnv: hunter2abc", f"apiKeyEnv: {REDACTED}"),
        ('{"apiKeyEnv": "hunter2abc"}', f'{{"apiKeyEnv": "{REDACTED}"}}'),
        ("SECRET_ENV=hunter2abc", f"SECRET_ENV={REDACTED}"),
        ("API_KEY_ENV=a8f5f167f44f4964e6c998dee827110c", f"API_KEY_ENV={REDACTED}"),
        ("token.env: 8c1f2d9e7a6b5c4d", f"token.env: {REDACTED}"),
        ("providers.p.apiKeyEnv: hunter2abc", f"providers.p.apiKeyEnv: {REDACTED}"),
        ("providers.p.apiKeyEnv: not a name", f"providers.p.apiKeyEnv: {REDACTED} a name"),
    ],
)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_key_ending_in_env_is_masked_in_the_log_as_any_key(
    line: str, logged: str, fmt: str
) -> None:
    """No line is excepted from the scrub: a key ending in ``env`` (a provider's body echoing
    a request, a tool's output) holds its secret, a file's path to ``apiKeyEnv`` too."""
    record = logging.LogRecord("cascade", logging.WARNING, __file__, 1, line, None, None)
    assert _written(record, fmt).endswith(logged)


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
