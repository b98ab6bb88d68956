"""Each refusal of the config file reaches the log readable: no key of the schema, nor an
entry's name (a provider ``github-token``), makes the secret scrub read its path and the
reason after it as a secret's key and its value (``reflectTokens: [REDACTED] should be a
valid integer``), in the text log and the JSON one."""

from __future__ import annotations

import json
import logging
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from proxy.banner import startup_banner
from proxy.cascade.redaction import REDACTED
from proxy.config import Config, ConfigError, config_warnings, load_config, parse_config
from proxy.config_watch import ConfigHolder
from proxy.logs import JsonFormatter, TextFormatter
from proxy.settings import Settings

_WRONG: tuple[object, ...] = ([1], -1, 2**60, "")
"""A value of the wrong type for any key, one below a bound, one past 2**53, an empty one."""


def _model(ann: Any) -> Any:
    """``ann`` without ``None`` and its annotations: the model or type a key takes."""
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        given = [a for a in typing.get_args(ann) if a is not type(None)]
        ann = given[0] if len(given) == 1 else ann
    return typing.get_args(ann)[0] if typing.get_origin(ann) is typing.Annotated else ann


def _paths(model: type[BaseModel], at: list[str | int], name: str) -> Iterator[list[str | int]]:
    """Every key of ``model`` as the file spells its path, an entry named ``name``."""
    for field_name, field in model.model_fields.items():
        if field.exclude:
            continue
        path = [*at, field.alias or to_camel(field_name)]
        ann = _model(field.annotation)
        args = [_model(a) for a in typing.get_args(ann)]
        inner = args[-1] if typing.get_origin(ann) in (dict, tuple) and args else None
        yield path
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _paths(ann, path, name)
        elif isinstance(inner, type) and issubclass(inner, BaseModel):
            yield from _paths(inner, [*path, name if typing.get_origin(ann) is dict else 0], name)


def _file(path: list[str | int], value: object) -> dict[str, Any]:
    """A file that sets the key at ``path`` to ``value``, an auth key where the path is one."""
    raw: dict[str, Any] = {}
    here: Any = raw
    for key, after in zip(path, [*path[1:], None], strict=True):
        if after is None:
            here[key] = value
        elif isinstance(after, int):
            here[key] = [{"keyEnv": "K_A", "tenant": "t"}]
            here = here[key][0]
        else:
            here = here.setdefault(key, {})
    return raw


def _written(message: str, fmt: str) -> str:
    record = logging.LogRecord(
        "cascade.config", logging.WARNING, __file__, 1, "%s", (message,), None
    )
    if fmt == "json":
        return str(json.loads(JsonFormatter().format(record))["message"])
    return TextFormatter().format(record)


def _refusals(name: str) -> Iterator[str]:
    for path in _paths(Config, [], name):
        for value in _WRONG:
            try:
                parse_config(_file(path, value), {})
            except ConfigError as exc:
                yield str(exc)
    others = [
        {"agents": {name: {"context": c}}} for c in ({"eviction": {"maxTokens": 1}}, {"x": 1})
    ]
    others += [{"providers": {name: {key: "x"}}} for key in ("apiKey", "token", "password")]
    others += [{"providers": {name: {"caFile": "${CA}"}}}, {"agents": {name: {"model": "${M}"}}}]
    for raw in others:
        try:
            parse_config(raw, {})
        except ConfigError as exc:
            yield str(exc)


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("name", ["p", "github-token", "db_password"])
def test_every_keys_refusal_is_logged_whole(name: str, fmt: str) -> None:
    """A token count's key (``minResultTokens``, ``reflectTokens``) and an entry named for a
    token or a password read to the scrub as a secret's key, the reason as its value:
    ``Input`` (``Input should be a valid integer``), ``at`` (``at most 2**53``), ``not``
    (``not an http(s) URL``) was masked. The refusal says the path and the reason with no
    colon between them where the scrub would read one so."""
    refusals = list(_refusals(name))
    assert len(refusals) > 100
    masked = [said for said in refusals if REDACTED in _written(said, fmt)]
    assert masked == []


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("name", ["github-token", "db_password"])
def test_an_entry_named_for_a_secret_is_logged_whole_at_start_up(name: str, fmt: str) -> None:
    """The start-up block's provider line and stages, and the warnings of a model and an
    unset key, for an entry or tenant named for a token or a password: ``provider
    github-token: http://…`` was logged ``provider github-token: [REDACTED]``,
    ``models.db_password: [REDACTED] no …``, ``tenant 'secret': [REDACTED] is unset``.
    ``$K_A`` is a variable's reference, no value, so its line keeps the colon every tenant's
    has; ``$Team_Key`` (a name in mixed case) still reads as a value, so its line has none."""
    raw = {
        "providers": {name: {"baseUrl": "http://127.0.0.1:9/v1"}},
        "agents": {"default": {"provider": name}, name: {"model": "m"}},
        "models": {"default": {"contextLimit": 5000}, name: {"reservedOutput": 10}},
        "auth": {
            "keys": [{"keyEnv": "K_A", "tenant": name}, {"keyEnv": "Team_Key", "tenant": name}]
        },
    }
    cfg = parse_config(raw, {})
    block = startup_banner(Settings(), cfg, {}, database="", embedded_at=None, paths=())
    lines = [*block.splitlines(), *config_warnings(cfg, {})]
    assert f"provider {name} at http://127.0.0.1:9/v1, no apiKeyEnv" in block
    assert any(line.startswith(f"models.{name} sets no contextLimit") for line in lines)
    assert f"auth key of tenant '{name}': $K_A is unset, no request can use it" in lines
    assert f"auth key of tenant '{name}' $Team_Key is unset, no request can use it" in lines
    assert [line for line in lines if REDACTED in _written(line, fmt)] == []


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("file", ["token.json", "cascade-secret.json", "agents.json"])
def test_a_config_files_warning_is_logged_whole_whatever_the_files_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, file: str, fmt: str
) -> None:
    """``config /run/secrets/token.json: auth key of tenant …`` read to the scrub as a
    secret's key (the file's name) and its value: the line began ``[REDACTED] key of``."""
    path = tmp_path / file
    path.write_text(json.dumps({"auth": {"keys": [{"keyEnv": "K_A", "tenant": "a"}]}}))
    with caplog.at_level(logging.WARNING, logger="cascade.config"):
        ConfigHolder(load_config(path, {}), path)
    lines = [_written(r.getMessage(), fmt) for r in caplog.records]
    assert any("auth key of tenant 'a': $K_A is unset, no request can" in x for x in lines)
    assert [line for line in lines if REDACTED in line] == []
