"""An agent's name is the memory scope ``agent:<name>`` its facts are promoted to, so the
config takes only names the memory API takes as a scope: a longer one or one with a control
character would hold facts no client could list, add to or delete."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cascade.types import CONFIG_REJECTED
from proxy.cli import main
from proxy.config import ConfigError, parse_config
from proxy.config_watch import ConfigHolder
from proxy.services.memory import parse_scope


@pytest.mark.parametrize("name", ["a" * 257, "tab\there", "bell\x07", "del\x7f"])
def test_an_agent_name_no_memory_scope_can_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="at most 256 characters, none a control character"):
        parse_config({"agents": {name: {}}}, env={})


@pytest.mark.parametrize("name", ["a" * 256, "llama3:8b", "openai/gpt-4o", "élan vital"])
def test_an_agent_name_the_scope_takes_is_taken(name: str) -> None:
    cfg = parse_config({"agents": {name: {}}}, env={})
    assert name in cfg.agents
    assert parse_scope(f"agent:{name}") == f"agent:{name}"


def test_an_empty_agent_name_is_refused() -> None:
    """No request reaches it (a ``model`` of ``""`` takes ``default``) and no scope names it
    (``agent:`` is none): its settings would be dead without a word, as a template filled
    from an unset variable writes it."""
    with pytest.raises(ConfigError, match="agents: an empty name"):
        parse_config({"agents": {"": {}}}, env={})


def test_config_check_refuses_an_empty_agent_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agents.json"
    path.write_text('{"agents": {"": {"model": "gpt-4o"}}}')
    assert main(["config", "check", "--config", str(path)]) == 2
    assert f"config check: {path}: agents: an empty name is no agent" in capsys.readouterr().err


def test_a_reload_naming_an_empty_agent_is_rejected_and_the_config_kept(tmp_path: Path) -> None:
    """A reload (SIGHUP or a save) is judged as the start's file is: ``config.rejected``
    with the reason, the config in force kept."""
    path = tmp_path / "agents.json"
    path.write_text('{"agents": {"coder": {}}}')
    holder = ConfigHolder.from_file(path, {})
    before = holder.current
    path.write_text('{"agents": {"": {}}}')

    name, data = holder.reload({})

    assert name == CONFIG_REJECTED
    assert "agents: an empty name" in data["reason"]
    assert holder.current is before
