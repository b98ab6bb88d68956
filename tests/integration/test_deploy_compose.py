"""The Compose deployment, offline (no Docker engine here): docker-compose.yml against the
Compose specification, and .env.example against what the compose file reads and hands the
proxy."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_validates_against_compose_spec() -> None:
    exe = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.compose-spec", str(ROOT / "docker-compose.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_check_rejects_a_broken_file(tmp_path: Path) -> None:
    """The check above can fail: a misspelt key is caught."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text((ROOT / "docker-compose.yml").read_text().replace("depends_on", "depend_on"))
    exe = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.compose-spec", str(broken)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0


# --- .env.example documents what docker-compose.yml reads ---------------------------------

_COMPOSE_VAR = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")  # ${VAR}, ${VAR:-x}; not $${
_ASSIGNED = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)


def undocumented(compose: str, env_example: str) -> set[str]:
    """The variables ``compose`` substitutes that ``env_example`` does not assign. Compose
    substitutes nothing in a comment."""
    lines = [line for line in compose.splitlines() if not line.lstrip().startswith("#")]
    return set(_COMPOSE_VAR.findall("\n".join(lines))) - set(_ASSIGNED.findall(env_example))


def test_env_example_assigns_every_variable_the_compose_file_reads() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    assert _COMPOSE_VAR.findall(compose)  # the pattern finds what the file uses
    assert undocumented(compose, (ROOT / ".env.example").read_text()) == set()


def test_a_variable_missing_from_env_example_is_caught() -> None:
    compose = (
        "# ${IN_A_COMMENT}\nenvironment:\n  A: ${CASCADE_A:-x}\n  B: ${CASCADE_B}\n"
        "  C: $${ESCAPED}\n"
    )
    assert undocumented(compose, "CASCADE_A=1\n# CASCADE_B=2\n") == {"CASCADE_B"}


def test_env_example_is_key_value_lines_and_comments() -> None:
    # docker compose reads it as .env: anything else is a parse error at `docker compose up`
    for line in (ROOT / ".env.example").read_text().splitlines():
        assert not line or line.startswith("#") or _ASSIGNED.match(line), line


_MENTIONED = re.compile(r"^(?:#\s*)?([A-Z_][A-Z0-9_]*)=", re.MULTILINE)  # set or offered


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's substitution of ``env`` into ``text``, in the forms docker-compose.yml uses:
    ``$$``, ``${VAR}``, ``${VAR:-default}`` and ``${VAR-default}``, defaults nested."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            found = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:-|-)?(.*)", text[i + 2 : j - 1], re.S)
            assert found, text
            name, sep, default = found.groups()
            value = env.get(name)
            if value is None or (sep == ":-" and not value):
                value = interpolate(default, env) if sep else ""
            out.append(value)
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def proxy_environment(compose: str, dotenv: Mapping[str, str]) -> dict[str, str]:
    """What the proxy's container gets with ``dotenv`` as .env: every variable of it (the
    service's ``env_file``), then its ``environment:`` substituted, which wins over it."""
    import yaml

    service = yaml.safe_load(compose)["services"]["cascade"]
    assert [e["path"] for e in service["env_file"]] == [".env"]
    given = {k: interpolate(str(v), dotenv) for k, v in service["environment"].items()}
    return {**dotenv, **given}


def test_a_setting_in_env_reaches_the_proxy_as_env_says() -> None:
    """What .env.example sets or offers (a commented line), set in .env, is what the proxy
    gets: ``environment:`` must not replace it, as it did DATABASE_URL, which a deployment
    behind a pooler sets to the pooler's URL."""
    compose = (ROOT / "docker-compose.yml").read_text()
    offered = set(_MENTIONED.findall((ROOT / ".env.example").read_text()))
    assert {"DATABASE_URL", "CASCADE_DB_POOLER", "DATABASE_LISTEN_URL"} <= offered
    dotenv = {name: f"value-of-{name}" for name in offered}
    got = proxy_environment(compose, dotenv)
    assert {name: got[name] for name in offered} == dotenv


def test_without_env_the_proxy_uses_the_compose_postgres() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    for dotenv in ({}, {"DATABASE_URL": ""}):  # no .env; .env.example copied as it is
        got = proxy_environment(compose, dotenv)
        assert got["DATABASE_URL"] == "postgresql://cascade:cascade@postgres:5432/cascade"
        assert "CASCADE_DB_POOLER" not in got and "DATABASE_LISTEN_URL" not in got
    got = proxy_environment(compose, {"CASCADE_DB_PASSWORD": "s3cret"})
    assert got["DATABASE_URL"] == "postgresql://cascade:s3cret@postgres:5432/cascade"


def test_the_substitution_is_compose_s() -> None:
    env = {"A": "a", "EMPTY": ""}
    assert interpolate("${A}-${A:-x}-${EMPTY:-d}-${EMPTY-d}-${NONE}-$${A}", env) == "a-a-d---${A}"
    assert interpolate("u:${NONE:-p${A:-z}q}@h", env) == "u:paq@h"
