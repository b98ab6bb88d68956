"""What a reload tells: its log line, what it changed by the file's key paths, and the
frame every open session stream gets (``for_streams``).

``config agents.json reloaded`` alone leaves the operator to guess whether the save did
what was meant (a provider's ``baseUrl``, a key removed, a limit): the line names each
setting that changed, was added or was removed, by its place in the file
(``providers.local.baseUrl``, ``agents.coder.context.eviction.atFraction``), never its value.
The file holds no secret (a key goes by its variable's name), but a ``baseUrl`` may carry a
password and a redaction pattern the text it hides, and the names are what the operator
needs to check the save against the edit. A proxy key is named by its variable
(``auth.keys[$CASCADE_KEY_TEAM_A]``), as the warnings and refusals name it, not by its place in
the list, which a removal shifts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.config import Config

__all__ = ["changes", "describe_changes", "for_streams"]


def changes(old: Config, new: Config) -> tuple[list[str], list[str], list[str]]:
    """The key paths ``new`` changed, added and removed against ``old``, each in file order."""
    changed: list[str] = []
    added: list[str] = []
    removed: list[str] = []
    _walk(_tree(old), _tree(new), "", changed, added, removed)
    return changed, added, removed


def describe_changes(old: Config, new: Config) -> str:
    """The reload line's tail: ``changed providers.p.baseUrl; removed auth.keys[$K_B]``, or
    that no setting changed (a save of the same settings, a reformatted file). It never
    raises: the reload it describes is in force already, and its event and pools follow."""
    try:
        changed, added, removed = changes(old, new)
    except Exception:  # a config no dump walks: the line says the reload, not its details
        return "(the settings changed could not be listed)"
    parts = [
        f"{what} {_listed(paths)}"
        for what, paths in (("changed", changed), ("added", added), ("removed", removed))
        if paths
    ]
    return "; ".join(parts) if parts else "no setting changed"


LISTED = 10
"""The most paths a reload's line names of each kind, then the count of the rest: a file
generated anew (a model list of thousands) would put every path on one line."""


def _listed(paths: list[str]) -> str:
    more = f" and {len(paths) - LISTED} more" if len(paths) > LISTED else ""
    return ", ".join(paths[:LISTED]) + more


def for_streams(cfg: Config, name: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The event as every open session stream gets it. With proxy keys those streams are
    tenants', not the operator's: the file's path and a refusal's reason (which names the
    entries of every tenant's keys and agents) stay in the log, and the frame says only what
    happened. Without keys (one user, on loopback) it says why."""
    return (name, {}) if cfg.auth.keys else (name, data)


def _tree(cfg: Config) -> dict[str, Any]:
    """The config as the file's keys (camelCase), proxy keys by their variable's name."""
    tree = cfg.model_dump(by_alias=True, mode="json")
    auth = tree.get("auth") or {}
    auth["keys"] = {f"${k['keyEnv']}": k for k in auth.get("keys") or ()}
    return tree


def _walk(
    old: Any,
    new: Any,
    at: str,
    changed: list[str],
    added: list[str],
    removed: list[str],
) -> None:
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        if old != new:
            changed.append(at)
        return
    for key in new:
        path = _path(at, key)
        if key not in old:
            added.append(path)
        else:
            _walk(old[key], new[key], path, changed, added, removed)
    removed.extend(_path(at, key) for key in old if key not in new)


def _path(at: str, key: str) -> str:
    if key.startswith("$"):  # a proxy key, by its variable
        return f"{at}[{key}]"
    return f"{at}.{key}" if at else key
