"""Reading config/agents.json into the JSON object ``proxy.config`` validates: each way a file
is no such object (missing, unreadable, not UTF-8, not JSON, a key named twice in one object,
not an object at the top) is a :class:`ConfigError` naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proxy.config_checks import ConfigError

__all__ = ["read_object"]


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
