"""A refused setting or config file is one line that names what to change and never repeats
the value refused: a secret put in the wrong place (an ``apiKey`` in agents.json) must not
reach the log, nor the ``config.rejected`` event every open session stream receives."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.config import ConfigError, load_config
from proxy.config_watch import ConfigHolder
from proxy.settings import Settings
from tests.unit.starts import START_COMMANDS, run_start

SECRET = "sk-in-the-wrong-place-0123456789"


@pytest.fixture
def saved_logging() -> Iterator[None]:
    """``serve`` configures the cascade logger; put it back."""
    logger = logging.getLogger("cascade")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


def test_a_config_key_holding_a_secret_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = tmp_path / "agents.json"
    bad = {
        "providers": {"openai": {"apiKey": SECRET}},
        "context": {"eviction": {"atFraction": SECRET}},
    }
    path.write_text(json.dumps(bad))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    reason = str(refused.value)
    assert SECRET not in reason
    assert "\n" not in reason
    assert "providers.openai.apiKey is refused: Extra inputs are not permitted" in reason
    assert "context.eviction.atFraction: Input should be a valid number" in reason
    assert "errors.pydantic.dev" not in reason


def test_a_rejected_reload_sends_no_secret_to_the_event_streams(tmp_path: Path) -> None:
    path = tmp_path / "agents.json"
    path.write_text("{}")
    holder = ConfigHolder(load_config(path), path)
    bad = {"agents": {"coder": {"context": {"toolOutput": {"maxChars": SECRET}}}}}
    path.write_text(json.dumps(bad))
    name, data = holder.reload({})
    assert name == "config.rejected"
    assert SECRET not in data["reason"]
    assert data["reason"].startswith("agents.coder.context: toolOutput.maxChars: Input should")


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("CASCADE_PORT", "abc", "CASCADE_PORT: Input should be a valid integer"),
        ("CASCADE_LOG_LEVEL", "loud", "CASCADE_LOG_LEVEL: Input should be 'critical', 'error'"),
        ("CASCADE_LEASE_TTL_SECONDS", "100", "CASCADE_LEASE_TTL_SECONDS: Input should be less"),
        ("CASCADE_DB_POOLER", "session", "CASCADE_DB_POOLER: Input should be 'none' or"),
    ],
)
def test_a_bad_setting_is_one_line_naming_its_variable(
    variable: str,
    value: str,
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    saved_logging: None,
) -> None:
    monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    monkeypatch.setenv(variable, value)
    assert main(["serve"]) == 2  # CASCADE_LOG_LEVEL=loud was a ValueError traceback
    [printed] = capsys.readouterr().err.splitlines()
    assert printed.startswith(f"cascade-proxy serve: {line}")
    assert f"'{value}'" not in printed


def test_the_log_level_is_read_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_LOG_LEVEL", "WARNING")
    assert Settings().log_level == "warning"


@pytest.mark.parametrize("command", START_COMMANDS)
def test_with_json_logs_a_refused_setting_is_json_too(command: list[str], tmp_path: Path) -> None:
    """Under uvicorn the settings are read in the factory, before logging is set up: the
    refusal was pydantic's multi-line traceback, quoting the value, in a JSON log."""
    env = {**os.environ, "CASCADE_LOG_FORMAT": "json", "CASCADE_POOL_MAX_SIZE": SECRET}
    env.pop("CASCADE_CONFIG", None)
    done = run_start(command, env, cwd=tmp_path)
    assert done.returncode != 0
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert lines and all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    assert any(
        "CASCADE_POOL_MAX_SIZE: Input should be a valid integer" in line["message"]
        for line in lines
    )
    assert SECRET not in done.stderr


def test_a_multiprocess_dir_that_is_a_file_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    saved_logging: None,
) -> None:
    taken = tmp_path / "not-a-dir"
    taken.write_text("")
    monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(taken))
    assert main(["serve"]) == 2  # was FileExistsError's traceback out of os.makedirs
    [printed] = capsys.readouterr().err.splitlines()
    assert printed == (
        f"cascade-proxy serve: PROMETHEUS_MULTIPROC_DIR: {taken} is not a directory this"
        " process can write (File exists)"
    )


@pytest.mark.parametrize("command", [["serve"], ["config", "check"]])
def test_a_refused_config_file_at_start_is_named_once(
    command: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    saved_logging: None,
) -> None:
    """A reload's refusal names the file (``config agents.json rejected, …``); a start's said
    only the key, whichever file ``--config``, ``CASCADE_CONFIG`` or the working directory
    gave. A reason that names the file already (missing, not JSON) is not given it twice."""
    bad = tmp_path / "agents.json"
    bad.write_text('{"models": {"default": {"contextLimit": "x"}}}')
    missing = tmp_path / "missing.json"
    assert main([*command, "--config", str(bad)]) == 2
    assert main([*command, "--config", str(missing)]) == 2
    said = " ".join(command)
    assert capsys.readouterr().err.splitlines() == [
        f"cascade-proxy {said}: {bad}: models.default.contextLimit: Input should be a valid"
        " integer",
        f"cascade-proxy {said}: config file {missing} does not exist",
    ]


def test_a_refused_openai_base_url_is_not_put_on_the_config_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default provider's URL comes from the environment when the file names no
    ``providers.openai``: its refusal names the variable, and no file is at fault."""
    config = tmp_path / "agents.json"
    config.write_text("{}")
    monkeypatch.setenv("OPENAI_BASE_URL", "api.openai.com/v1")
    assert main(["config", "check", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "cascade-proxy config check: OPENAI_BASE_URL: not an http(s) URL with a host (and a"
        " port 1-65535)\n"
    )
