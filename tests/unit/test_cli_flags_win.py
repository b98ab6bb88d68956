"""``serve``'s flags win over the variables they override (README, CLI): a variable a flag
overrides is not judged, so a Kubernetes service link in ``CASCADE_PORT`` does not refuse a
``serve --port 8080``, whose port is given."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from proxy.cli import _parser
from proxy.cli_run import _settings


def test_a_variable_a_flag_overrides_is_not_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_PORT", "tcp://10.0.0.1:8080")  # a Service named cascade
    monkeypatch.setenv("CASCADE_HOST", " ")
    args = _parser().parse_args(["serve", "--host", "127.0.0.1", "--port", "9000"])
    settings = _settings(args)
    assert (settings.host, settings.port) == ("127.0.0.1", 9000)
    with pytest.raises(ValidationError, match="service link"):  # without the flag, refused
        _settings(_parser().parse_args(["serve", "--host", "127.0.0.1"]))


@pytest.mark.parametrize("command", [["serve"], ["config", "check"]])
def test_an_empty_config_flag_is_the_default_config_as_the_variable_is(
    command: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--config "$CONFIG"`` with the variable unset read the path ".", and was refused
    with "cannot read config file .: Is a directory", where ``CASCADE_CONFIG=`` is the
    default config."""
    monkeypatch.chdir(tmp_path)  # no config/agents.json here: the built-in defaults
    monkeypatch.delenv("CASCADE_CONFIG", raising=False)
    assert _settings(_parser().parse_args([*command, "--config", ""])).config is None
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "agents.json").write_text("{}")
    assert _settings(_parser().parse_args([*command, "--config", ""])).config == Path(
        "config/agents.json"
    )
