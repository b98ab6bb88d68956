"""The ``CASCADE_*`` variables the manual names and the ones the project reads are the same:
a variable README (or docs/, ``.env.example``, ``docker-compose.yml``) sends a user to set is
read by something, and each one the proxy, the bench, the scripts or the suite reads is
described in README, so a renamed or new variable fails here instead of a user's setting
silently doing nothing."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.settings import Settings
from proxy.settings_names import OTHER_VARIABLES, unknown_variables
from tests.unit.readme import ROOT, TEXT

_NAME = re.compile(r"\bCASCADE_[A-Z0-9_]*[A-Z0-9]\b")

_MANUALS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / ".env.example",
    ROOT / "docker-compose.yml",
]

_READ = re.compile(
    r"""(?:environ(?:\.get)?\s*[\[(]\s*|getenv\(\s*|os\.environ/)["']?(CASCADE_\w+)"""
)
"""A variable read by its name: ``os.environ.get("…")``, ``os.environ["…"]``, ``getenv``,
LiteLLM's ``os.environ/…``."""


def _settings_variables() -> set[str]:
    out = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        out.add(alias if isinstance(alias, str) else f"CASCADE_{name.upper()}")
    return {v for v in out if v.startswith("CASCADE_")}


def _sources() -> list[Path]:
    found = [ROOT / "Makefile"]
    for folder in ("proxy", "bench", "scripts", "tests"):
        found += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sh", ".yaml")]
    return found


def _read_by_the_project() -> set[str]:
    """The settings' variables, the others ``proxy.settings_names`` lists, and each one a
    module, script or the Compose file reads by its name; the test helpers' own
    (``CASCADE_TEST_*``) are described where they are read, README naming the prefix."""
    read = _settings_variables() | OTHER_VARIABLES
    for path in _sources():
        read |= set(_READ.findall(path.read_text(encoding="utf-8", errors="replace")))
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    read |= set(re.findall(r"\$\{(CASCADE_\w+)", compose))
    return {v for v in read if not v.startswith("CASCADE_TEST_")}


def _config_named(text: str) -> set[str]:
    """The variables a config example names for a key (``"keyEnv": "CASCADE_KEY_CI"``)."""
    return set(re.findall(r'"(?:keyEnv|apiKeyEnv|metricsKeyEnv)": "(\w+)"', text))


def test_every_variable_the_manuals_name_is_read() -> None:
    unread = {}
    for path in _MANUALS:
        text = path.read_text(encoding="utf-8")
        config = _config_named(text)
        for name in set(_NAME.findall(text)):
            if f"`{name} (did you mean" in " ".join(text.split()):  # the typo warning's example
                continue
            if name in _read_by_the_project() or unknown_variables({name: ""}, config) is None:
                continue
            unread[name] = path.name
    assert unread == {}


def test_every_variable_the_project_reads_is_in_readme() -> None:
    read = _read_by_the_project()
    assert {"CASCADE_PORT", "CASCADE_URL", "CASCADE_BENCH_UPSTREAM", "CASCADE_SOAK"} <= read
    assert sorted(v for v in read if f"`{v}" not in TEXT) == []


def test_readme_says_where_the_test_helpers_variables_are_described() -> None:
    assert "`CASCADE_TEST_*`" in TEXT
    assert "each described in the module that reads it" in " ".join(TEXT.split())


def test_the_image_and_the_pins_readme_names_are_the_files() -> None:
    """Deploying's base image, user, tiktoken folder and health check, the Compose database
    image, and the LiteLLM version Layout names are those of the files that set them."""
    from bench.litellm_env import REQUIREMENT

    docker = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    base = re.findall(r"^FROM (\S+)", docker, re.M)[-1]
    user = re.findall(r"^USER (\d+)", docker, re.M)[-1]
    cache = re.search(r"TIKTOKEN_CACHE_DIR=(\S+)", docker)
    database = re.search(r"image: (pgvector/\S+)", compose)
    assert cache is not None and database is not None
    flat = " ".join(TEXT.split())
    assert f"`Dockerfile`, `{base}`" in flat
    assert f"It runs as user {user}, who owns `/data`" in flat
    assert f"`TIKTOKEN_CACHE_DIR={cache[1]}`" in flat
    assert "HEALTHCHECK" in docker and "/healthz" in docker.split("HEALTHCHECK")[1]
    assert "The health check asks `/healthz`" in flat
    assert f"{database[1]} beside it" in flat
    assert f"`{REQUIREMENT}`" in flat
