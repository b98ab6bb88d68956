"""README's examples as a user copies them: each JSON snippet is a valid part of
``config/agents.json``, and the fields README says an answer has (or lacks) are the ones the API
describes, and the CLI it lists is the parser's, so an example that drifts from the code fails
here."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from proxy.api.session_schemas import SCHEMAS
from proxy.banner import startup_banner
from proxy.cli import _parser
from proxy.cli_sessions import _ls
from proxy.config import (
    AgentConfig,
    AuthConfig,
    ConfigError,
    EmbeddingConfig,
    ModelConfig,
    ProviderConfig,
    load_config,
    parse_config,
)
from proxy.config_context import ContextConfig
from proxy.settings import Settings
from tests.unit import design
from tests.unit.readme import README, ROOT, TEXT, snake as _snake

SNIPPETS = re.findall(r"```json\n(.*?)```", TEXT, re.S)


def _fields(name: str) -> set[str]:
    schema: dict[str, Any] = SCHEMAS[name]
    if name == "list":
        schema = schema["properties"]["data"]["items"]
    return set(schema["properties"])


def _with_snippet(snippet: str) -> dict[str, Any]:
    """The shipped config with the snippet's top-level keys put in (a fragment such as
    ``"auth": {...}`` is read as the members of an object), plus every agent the snippet's
    keys name, as README's sentence after it asks."""
    raw = json.loads((ROOT / "config" / "agents.json").read_text(encoding="utf-8"))
    raw.update(json.loads("{" + snippet + "}"))
    for key in raw.get("auth", {}).get("keys", []):
        for agent in key.get("agents", []):
            raw["agents"].setdefault(agent, {})
    return raw


def _env(raw: dict[str, Any]) -> dict[str, str]:
    """A distinct value for each key variable the config names."""
    auth = raw.get("auth", {})
    names = [k["keyEnv"] for k in auth.get("keys", [])] + [auth.get("metricsKeyEnv")]
    return {name: f"key-{i}" for i, name in enumerate(names) if name}


def test_readme_has_the_proxy_keys_snippet() -> None:
    assert len(SNIPPETS) >= 1 and '"auth"' in SNIPPETS[0]


@pytest.mark.parametrize("snippet", SNIPPETS)
def test_each_json_snippet_loads_into_the_shipped_config(snippet: str) -> None:
    raw = _with_snippet(snippet)
    parse_config(raw, env=_env(raw))


def test_a_key_limited_to_an_agent_the_file_lacks_is_refused_as_readme_says() -> None:
    """README tells a user pasting the snippet to define the agents it names: the file is
    refused otherwise."""
    raw = json.loads("{" + SNIPPETS[0] + "}")
    named = sorted({a for k in raw["auth"]["keys"] for a in k.get("agents", [])})
    assert named == ["reviewer"]
    assert "each agent a key's `agents` lists must be an agent of the file" in README
    raw["agents"] = {"default": {}}
    with pytest.raises(ConfigError, match="reviewer not in agents"):
        parse_config(raw, env=_env(raw))


def test_the_session_list_fields_readme_leaves_out_are_the_views_own() -> None:
    stated = re.search(r"`calibration`; not ((?:`\w+`(?:, | or )?)+)", README)
    assert stated is not None
    left_out = set(re.findall(r"`(\w+)`", stated[1]))
    assert left_out == _fields("show") - _fields("list")


def test_the_start_up_block_readme_shows_is_the_one_the_shipped_config_gives() -> None:
    """README's example block, for ``make run`` with the shipped config and ``OPENAI_API_KEY``
    set, is what ``startup_banner`` writes for them."""
    shown = TEXT.split("### Start-up")[1].split("```\n")[1].split("```")[0]
    settings = Settings(host="127.0.0.1", port=8080, config=Path("config/agents.json"))
    cfg = load_config(ROOT / "config" / "agents.json", env={"OPENAI_API_KEY": "sk-x"})
    block = startup_banner(
        settings,
        cfg,
        {"OPENAI_API_KEY": "sk-x"},
        database="",
        embedded_at=Path("/home/me/.local/share/cascade/pgdata"),
        paths=["/ui", "/metrics"],
    )
    assert shown.rstrip("\n") == block


def test_the_sessions_ls_readme_shows_is_the_table_the_cli_prints() -> None:
    shown = TEXT.split("$ cascade-proxy sessions ls\n")[1].split("```")[0]
    session = {
        "id": "my-run-1",
        "agent": "default",
        "model": "gpt-4o",
        "message_count": 42,
        "occupancy": 18211,
        "reclaimed_tokens": 9120,
        "updated_at": "2026-12-01T21:36:20.991000+00:00",
    }
    assert shown.rstrip("\n") == _ls({"data": [session]})


def _flags(parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, argparse.ArgumentParser]]:
    """A parser's long options but ``--help``, and its subcommands by name."""
    flags, subs = [], {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subs = dict(action.choices)
        elif action.option_strings and action.option_strings[-1] not in ("--help", "--version"):
            flags.append(action.option_strings[-1])
    return flags, subs


def test_the_cli_readme_lists_is_every_command_with_its_flags() -> None:
    """README's CLI bullets name each command and action with the flags ``--help`` lists: a
    command or flag added or renamed in the parser and not there fails here."""
    section = " ".join(TEXT.split("\n### CLI\n")[1].split("\n### ")[0].split())
    bullets = {b.split()[0]: b for b in section.split(" - `cascade-proxy ")[1:]}
    _, commands = _flags(_parser())
    assert set(bullets) == set(commands)
    checked = 0
    for name, command in commands.items():
        flags, actions = _flags(command)
        usage = bullets[name].split("`")[0]  # `cascade-proxy NAME [--flag]… [ACTION]`
        head = usage.split(" check ")[0]  # `config check` names its one action in the usage
        assert re.findall(r"--[a-z-]+", head) == flags, name
        for action, parser in actions.items():
            own = [f for f in _flags(parser)[0] if f not in flags]
            spans = [s for s in bullets[name].split("`")[2::2] if s.split()[:1] == [action]]
            if name == "config":
                spans = [usage.split(f" {action} ", 1)[1]]
            assert spans, (name, action)  # the first is the ACTION list's; later ones cite it
            assert sorted(re.findall(r"--[a-z-]+", spans[0])) == sorted(own), (name, action)
            checked += 1
    assert checked >= 14  # config check, sessions' seven actions, memory's six


def test_the_commands_readme_says_end_their_help_with_exit_statuses_are_those_that_do() -> None:
    """``migrate --help`` ends with its statuses too, which README's sentence left out."""
    section = " ".join(TEXT.split("\n### CLI\n")[1].split("\n- ")[0].split())
    sentence = section.split("and for ")[1].split("; `cascade-proxy --version`")[0]
    _, commands = _flags(_parser())
    ending = {n for n, c in commands.items() if "exit status: " in (c.epilog or "")}
    assert set(re.findall(r"`([a-z]+)`", sentence)) == ending


def test_every_config_key_readme_names_by_its_path_is_one() -> None:
    """``toolOutput.compactMinSaving``, ``context.eviction.atFraction``,
    ``agents.<name>.fastModel``, ``auth.metricsKeyEnv``: a key renamed in the schema and not in
    the prose fails here (the tables' rows are checked against the defaults elsewhere)."""
    blocks = {f.alias or name: f.annotation for name, f in ContextConfig.model_fields.items()}
    models: dict[str, Any] = {
        **{f"context.{b}": m for b, m in blocks.items()},
        **{b: m for b, m in blocks.items()},
        "providers.<name>": ProviderConfig,
        "agents.<name>": AgentConfig,
        "models.<name>": ModelConfig,
        "embedding": EmbeddingConfig,
        "auth": AuthConfig,
    }
    pattern = "|".join(re.escape(m) for m in sorted(models, key=len, reverse=True))
    named = re.findall(rf"`({pattern})\.(\w+)", TEXT)
    assert len(named) > 30 and {m for m, _ in named} >= {"toolOutput", "agents.<name>", "auth"}
    assert [f"{m}.{k}" for m, k in named if _snake(k) not in models[m].model_fields] == []


def test_every_make_target_the_docs_name_is_one_of_the_makefile() -> None:
    root = Path(__file__).resolve().parents[2]
    targets = set(re.findall(r"^([a-z-]+):", (root / "Makefile").read_text(), re.M))
    docs = [TEXT, *(p.read_text(encoding="utf-8") for p in (root / "docs").glob("*.md"))]
    # every fenced block (sh or plain), a command indented, after a prompt or after &&
    shell = ["\n".join(re.findall(r"```[\w-]*\n(.*?)```", text, re.S)) for text in docs]
    command = r"(?:^[ \t]*(?:\$[ \t]+)?|&&[ \t]*)make ([a-z-]+)"
    named = {t for text in docs for t in re.findall(r"`make ([a-z-]+)", text)}
    named |= {t for text in shell for t in re.findall(command, text, re.M)}
    assert {"run", "test", "bench", "bench-test"} <= named and named - targets == set()
    flat = [" ".join(text.split()) for text in docs]  # a command may wrap
    variables = {v for text in flat for v in re.findall(r"`make [a-z-]+ ([A-Z_]+)=", text)}
    makefile = (root / "Makefile").read_text()
    assert "CONSTRAINTS_PYTHON" in variables
    assert {v for v in variables if f"$({v})" not in makefile} == set()


def test_designs_example_config_is_accepted_whole() -> None:
    """DESIGN's example ``config/agents.json`` (every block, ``auth`` too) loads: the file
    refuses a key it does not know, so each key the example shows is one the code reads."""
    raw = json.loads(re.findall(r"```json\n(.*?)```", design.design_text(), re.S)[0])
    names = [k["keyEnv"] for k in raw["auth"]["keys"]]
    cfg = parse_config(raw, env=dict.fromkeys(names, "k"))
    assert cfg.embedding.dimensions == raw["embedding"]["dimensions"]
    assert cfg.context_for("default").handoff.at_fraction == raw["context"]["handoff"]["atFraction"]
