"""Reading config/agents.json into the JSON object ``proxy.config`` validates: each way a file
is no such object (missing, unreadable, not UTF-8, not JSON, a key named twice in one object,
not an object at the top) is a :class:`ConfigError` naming the file. The file is read as
written: a ``${NAME}`` in it is refused, never expanded (:func:`check_references`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from proxy.cascade.redaction import compile_patterns, redact
from proxy.config_checks import VARIABLE, ConfigError, refusal

__all__ = ["check_references", "read_object"]


class _DuplicateKey(ValueError):
    """A JSON object of the config file names one key twice (``args[0]``)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_object(path: str | Path, data: bytes | None = None) -> dict[str, Any]:
    """The JSON object the file at ``path`` holds; ``data``: its bytes as the caller read them
    (``proxy.config.load_config``)."""
    p = Path(path)
    try:
        text = (p.read_bytes() if data is None else data).decode("utf-8-sig")  # a BOM is dropped
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {p} does not exist") from exc
    except OSError as exc:  # a directory, no permission: rejected like bad JSON
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p} is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    try:
        raw = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ConfigError(
            f"{p}: the key {exc.args[0]!r} appears twice in one object; JSON keeps only the "
            "last, so one of them would be silently ignored"
        ) from None
    except (ValueError, RecursionError) as exc:  # an integer past 4300 digits; deep nesting
        raise ConfigError(f"{p} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{p} must hold a JSON object at the top level")
    return raw


_REFERENCE = re.compile(r"\$\{(([A-Za-z_][A-Za-z0-9_]*)[^}]*)\}")
"""A shell's or Compose's variable reference, ``${NAME}`` or ``${NAME:-default}``."""


def check_references(data: Any, where: str = "") -> None:
    """No name or value of the file (``data``, as parsed) holds a ``${NAME}`` reference: the
    file is read as written, never expanded, so ``"model": "${MODEL}"`` sent that text
    upstream and a ``baseUrl`` of one was refused as no URL. Named by its place and the
    variable, never the value. A redaction pattern is a regular expression, where ``$`` and
    ``{`` mean something else: not looked at."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            at = f"{where}.{key}" if where else str(key)
            _no_reference(str(key), where or "the top level", "a name")
            if not (key == "patterns" and where.endswith("redaction")):
                check_references(value, at)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            check_references(value, f"{where}[{i}]")
    elif isinstance(data, str):
        _no_reference(data, where, "the value")


def _no_reference(text: str, where: str, what: str) -> None:
    found = _REFERENCE.search(text)
    if found is None:
        return
    key_env = where.lower().endswith(("keyenv", "key_env"))
    # a name there may hold - and . (openai-api-key), which a shell reads as a default's
    name = found[1] if key_env and VARIABLE.fullmatch(found[1]) else found[2]
    name = name if not redact(name, compile_patterns(()))[1] else "…"  # a key pasted
    if key_env:
        raise ConfigError(
            refusal(where, f"takes the variable's name as it is, {name}, not ${{{name}}}")
        )
    said = f"{what} holds ${{{name}}}, which is not expanded: the file is read as written; "
    said += "write the value itself (a key's variable goes by name in apiKeyEnv, keyEnv or "
    raise ConfigError(refusal(where, said + "metricsKeyEnv)"))
