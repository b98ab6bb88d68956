"""Hot reload of config/agents.json: validate on save, swap atomically, or keep the old one.

Editors often save by writing a new file and renaming it over the old one, so we watch the
directory and filter on the file's name. Only the directory itself is watched, not what is
below it: a data directory kept beside the config (as bench/overhead does) made every
PostgreSQL write wake the watcher and stat each changed file. Requests read
``holder.current`` once and use that snapshot for the whole request.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from watchfiles import awatch

from proxy.cascade.types import CONFIG_REJECTED, CONFIG_RELOADED
from proxy.config import Config, ConfigError, config_warnings, load_config

__all__ = ["ConfigHolder", "watch_config"]

log = logging.getLogger("cascade.config")


class ConfigHolder:
    """Holds the immutable Config in force; replaced whole, never mutated."""

    def __init__(self, config: Config, path: Path | None) -> None:
        self.current = config
        self.path = path
        self._warn(os.environ)

    def _warn(self, env: Mapping[str, str]) -> None:
        for warning in config_warnings(self.current, env):
            log.warning("config %s: %s", self.path, warning)

    def reload(self, env: Mapping[str, str] | None = None) -> tuple[str, dict[str, Any]]:
        """Try the file on disk; return the event to emit (reloaded or rejected)."""
        env = env if env is not None else os.environ
        try:
            self.current = load_config(self.path, env)
        except ConfigError as exc:
            log.warning("config %s rejected, keeping the previous one: %s", self.path, exc)
            return CONFIG_REJECTED, {"path": str(self.path), "reason": str(exc)}
        log.info("config %s reloaded", self.path)
        self._warn(env)
        return CONFIG_RELOADED, {"path": str(self.path)}


async def watch_config(
    holder: ConfigHolder, emit: Callable[[str, dict[str, Any]], None], stop: asyncio.Event
) -> None:
    """Reload on every change to the config file until ``stop`` is set."""
    if holder.path is None:
        return
    path = holder.path.resolve()
    name = path.name
    async for _ in awatch(path.parent, watch_filter=lambda _, p: os.path.basename(p) == name,
                          recursive=False, stop_event=stop, debounce=200, step=50):
        try:
            event = holder.reload()
        except Exception:  # a bug here must not end hot reload for the life of the process
            log.exception("config %s: reload failed, keeping the previous one", path)
            continue
        emit(*event)
