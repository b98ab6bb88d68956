"""Hot reload of config/agents.json: validate on save, swap atomically, or keep the old one.

Editors often save by writing a new file and renaming it over the old one, and a symlinked
config changes when its link (or a Kubernetes ConfigMap's ``..data`` link) is replaced, so
we watch the directories a save can reach (``_directories``: the path's own, a linked file's,
the one holding a linked directory on the path) and reload when the file's bytes changed.
Only the directories themselves are watched, not what is below them: with a data directory
beside the config, a recursive watch would wake on every PostgreSQL write, stat each file.
Editors that save in place (truncate, then write) and saves that delete the file first pass
through states that are no config at all; a file that does not parse is judged once it
stops changing (``SETTLE_SECONDS``), and the bytes are compared every ``RECHECK_SECONDS``
even when no change was announced. Requests read ``holder.current`` once and use that
snapshot for the whole request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import weakref
from collections.abc import Callable, Mapping
from contextlib import aclosing
from pathlib import Path
from typing import Any

from watchfiles import awatch

from proxy.cascade.redaction import compile_patterns, redact
from proxy.cascade.types import CONFIG_REJECTED, CONFIG_RELOADED
from proxy.config import Config, ConfigError, config_warnings, load_config
from proxy.config_checks import EnvironmentRefused
from proxy.config_report import describe_changes, for_streams

__all__ = ["ConfigHolder", "Hangup", "load_named", "reread", "watch_config"]

log = logging.getLogger("cascade.config")


Vet = Callable[[Config, Config], None]
"""A check of a reloaded config (first) against the one in force (second) that needs more
than the file: it raises ``ConfigError`` to refuse it (the lifespan's: each new ``caFile``
loads, ``transport.check_ca_files``)."""


class ConfigHolder:
    """Holds the immutable Config in force; replaced whole, never mutated. ``vet``, when
    set, judges each reload besides the file's own checks; ``on_reloaded`` is told of each
    config a reload puts in force (the lifespan's: the provider pools it no longer needs
    are retired, ``ProviderTransport.keep_only``)."""

    def __init__(
        self,
        config: Config,
        path: Path | None,
        data: bytes | None = None,
    ) -> None:
        self.current = config
        self.path = path
        # the bytes last judged, in force or refused: first those ``config`` was read from
        self.judged = data
        self.refused: str | None = None  # why those bytes were refused, when they were
        self.vet: Vet | None = None
        self.on_reloaded: Callable[[Config], None] | None = None
        self._warn(os.environ)

    @classmethod
    def from_file(cls, path: Path | None, env: Mapping[str, str]) -> ConfigHolder:
        """The config in ``path`` (defaults when None), remembering the bytes it was read
        from: the watcher, which starts once the database is up, compares the file with
        those, so a save made during the start is reloaded, not taken as already judged."""
        data = _read(path) if path is not None else None
        return cls(load_named(path, env, data), path, data)

    def _warn(self, env: Mapping[str, str]) -> None:
        for warning in config_warnings(self.current, env):
            # a file named for a secret (token.json) reads to the log's scrub as its key
            said = redact(f"config {self.path}: {warning}", compile_patterns(()))[1]
            log.warning("config %s warns: %s" if said else "config %s: %s", self.path, warning)

    def reload(
        self, env: Mapping[str, str] | None = None, data: bytes | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Try the file (``data``: its bytes as read, else the file on disk); return the
        event to emit (reloaded or rejected)."""
        env = env if env is not None else os.environ
        old = self.current
        try:
            new = load_config(self.path, env, data)
            if self.vet is not None:
                self.vet(new, old)
            self.current = new
        except ConfigError as exc:
            log.warning("config %s rejected, keeping the previous one: %s", self.path, exc)
            self.refused = str(exc)
            return CONFIG_REJECTED, {"path": str(self.path), "reason": str(exc)}
        self.refused = None
        log.info("config %s reloaded: %s", self.path, describe_changes(old, new))
        self._warn(env)
        if self.on_reloaded is not None:
            try:
                self.on_reloaded(self.current)
            except Exception:  # the config is in force all the same: said, not undone
                log.exception("config %s reloaded; acting on it failed", self.path)
        return CONFIG_RELOADED, {"path": str(self.path)}


def load_named(path: Path | None, env: Mapping[str, str], data: bytes | None = None) -> Config:
    """``load_config`` for a start (and ``config check``): a refusal names the file, as a
    reload's log line does, since ``--config``, ``CASCADE_CONFIG`` or the working directory
    may each have given it; a reason naming it already (missing, not JSON) is left as is."""
    try:
        return load_config(path, env, data)
    except ConfigError as exc:
        if path is None or isinstance(exc, EnvironmentRefused) or str(path) in str(exc):
            raise
        raise ConfigError(f"{path}: {exc}") from exc


async def watch_config(
    holder: ConfigHolder, emit: Callable[[str, dict[str, Any]], None], stop: asyncio.Event
) -> None:
    """Reload on every change to the config file until ``stop`` is set."""
    if holder.path is None:
        return
    # The path as given, not resolved: a config that is a symlink is updated by replacing
    # the link, or (Kubernetes ConfigMaps) a ``..data`` link beside it, and the directory a
    # resolved path pointed into can be deleted. So any change in the directories a save can
    # reach (``_directories``) is a candidate, and the file's bytes decide whether it changed.
    path = holder.path.absolute()
    # the bytes the holder was loaded from, not the file now: it may have been saved since
    if holder.judged is None:
        holder.judged = _read(path)
    while not stop.is_set():
        await _watch(holder, path, _directories(path), emit, stop)


async def reread(
    holder: ConfigHolder, emit: Callable[[str, dict[str, Any]], None], stop: asyncio.Event
) -> None:
    """Judge the file now, as a save would be judged (SIGHUP: :class:`Hangup`)."""
    if holder.path is None:
        log.info("SIGHUP: no config file, the defaults are in force: nothing to reload")
        return
    if await _check(holder, holder.path.absolute(), emit, stop):
        return
    if holder.refused is None:
        log.info("SIGHUP: config %s unchanged since it was last read", holder.path)
        return
    # Refused, so not the file in force; and the reason may lie outside it (a caFile put in
    # place since): judged again, its verdict logged with the reason as any reload's is.
    log.info("SIGHUP: config %s unchanged since it was refused; judging it again", holder.path)
    try:
        event = holder.reload(data=holder.judged)
    except Exception:  # as in _check: a bug here is logged, the config in force kept
        log.exception("config %s: reload failed, keeping the previous one", holder.path)
        return
    emit(*for_streams(holder.current, *event))


class Hangup:
    """SIGHUP for one app's life, from the lifespan's first step to its last.

    SIGHUP is what an operator sends a daemon to reload (``systemctl reload``, ``kill
    -HUP``), and what a closed terminal sends the process it ran: left to Python's default
    it ends the process at once, cutting every stream without the drain SIGTERM gets and
    leaving the embedded PostgreSQL running. So it is taken as the start begins
    (:meth:`install`), not once it is done: one during the start (migrations, the embedded
    server's first start) is noted and the file judged once the proxy serves
    (:meth:`serve`), since the start builds on the config it read; one while serving judges
    the file at once (:func:`reread`); one while stopping is said and changes nothing. A loop
    not in the main thread (an app served from another thread) cannot take signals, and
    Windows has no SIGHUP: nothing is installed there.
    """

    def __init__(self, holder: ConfigHolder) -> None:
        self.holder = holder
        self.noted = False  # a SIGHUP during the start, judged once serving
        self._serving: tuple[Callable[[str, dict[str, Any]], None], asyncio.Event] | None = None
        self._stopping = False
        self._tasks: set[asyncio.Task[None]] = set()

    def install(self) -> Callable[[], None]:
        """Take SIGHUP; return what gives it back. A loop has one handler per signal, and
        apps in one process (tests, a program embedding several) each take it: the handler
        tells every app taking it, and is removed with the last, so one app's stop leaves
        the others theirs, not Python's default."""
        loop = asyncio.get_running_loop()
        if not hasattr(signal, "SIGHUP"):  # Windows: no such signal to take
            return lambda: None
        taking = _TAKING.setdefault(loop, [])
        if not taking:
            try:
                loop.add_signal_handler(signal.SIGHUP, _hangup, taking)
            except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
                del _TAKING[loop]
                return lambda: None
        taking.append(self)

        def undo() -> None:
            taking.remove(self)
            if not taking:
                _TAKING.pop(loop, None)
                loop.remove_signal_handler(signal.SIGHUP)

        return undo

    def serve(
        self, emit: Callable[[str, dict[str, Any]], None], stop: asyncio.Event
    ) -> Callable[[], None]:
        """Judge the file on SIGHUP from now on, at once if one came during the start;
        return what ends that (the stop's first step), and the rereads under way: without the
        watcher nothing sets ``stop``, and one waiting for the file to settle would judge it,
        and tell the streams, once the bus had stopped."""
        self._serving = (emit, stop)
        if self.noted:
            self.noted = False
            self._reread()

        def stopping() -> None:
            self._serving, self._stopping = None, True
            for task in self._tasks:  # one waiting for a file to settle judges nothing now
                task.cancel()

        return stopping

    def _hangup(self) -> None:
        if self._serving is not None:
            self._reread()
        elif self._stopping:
            log.info("SIGHUP while the proxy stops: the config is not reread")
        else:
            self.noted = True
            log.info("SIGHUP during the start: the config is reread once the proxy serves")

    def _reread(self) -> None:
        assert self._serving is not None
        task = asyncio.get_running_loop().create_task(reread(self.holder, *self._serving))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


_TAKING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Hangup]] = (
    weakref.WeakKeyDictionary()
)
"""The apps taking SIGHUP, by the loop they run in (:meth:`Hangup.install`)."""


def _hangup(taking: list[Hangup]) -> None:
    for hangup in list(taking):
        hangup._hangup()


async def _watch(
    holder: ConfigHolder,
    path: Path,
    dirs: tuple[Path, ...],
    emit: Callable[[str, dict[str, Any]], None],
    stop: asyncio.Event,
) -> None:
    """Watch ``dirs`` until ``stop``, or until the link points into others."""
    async with aclosing(
        awatch(
            *dirs,
            watch_filter=None,
            recursive=False,
            stop_event=stop,
            debounce=200,
            step=50,
            rust_timeout=int(RECHECK_SECONDS * 1000),
            yield_on_timeout=True,  # an empty batch: compare the bytes anyway
        )
    ) as changes:
        await _check(holder, path, emit, stop)  # a change while re-arming
        try:
            async for _ in changes:
                await _check(holder, path, emit, stop)
                if _directories(path) != dirs:
                    break  # the link points into another directory now: watch that one
        except FileNotFoundError:
            if len(dirs) == 1:  # the config's own directory is gone: nothing left to watch
                raise
            # the link's target directory went away as its watch began (a ConfigMap updated
            # again at once): the caller watches where the link points now


async def _check(
    holder: ConfigHolder,
    path: Path,
    emit: Callable[[str, dict[str, Any]], None],
    stop: asyncio.Event,
) -> bool:
    """Reload when the file's bytes differ from the ones last judged (``holder.judged``);
    False when they do not, nothing done (SIGHUP's :func:`reread` says so)."""
    now = _read(path)
    if now == holder.judged:  # unchanged, or still missing: said once already
        return False
    now = await _settled(path, now, stop)
    if now == holder.judged or stop.is_set():
        return True
    holder.judged = now
    try:
        event = holder.reload(data=now)
    except Exception:  # a bug here must not end hot reload for the life of the process
        log.exception("config %s: reload failed, keeping the previous one", path)
        return True
    emit(*for_streams(holder.current, *event))
    return True


def _directories(path: Path) -> tuple[Path, ...]:
    """Where a save can change the config, each real directory once (the watch moves when a
    link does): its own, the linked file's, and each that holds a linked directory on its
    way (``current -> releases/7``), whose new target the old watch never hears of. While
    the path leads nowhere (a link loop, a release not there yet) those links' directories
    are watched, so the link put right is heard; the own directory as named if none is."""
    found: list[Path] = []
    try:
        found.append(path.parent.resolve(strict=True))
        found.append(path.resolve(strict=True).parent)
    except (OSError, RuntimeError):  # missing, or a link loop
        pass
    try:
        for link in (d for d in (path.parent, *path.parent.parents) if d.is_symlink()):
            if os.access(held := link.parent.resolve(strict=True), os.R_OK):  # else unwatchable
                found.append(held)
    except (OSError, RuntimeError):  # a link moved while read: its change reads it again
        pass
    return tuple(dict.fromkeys(found)) or (path.parent,)


RECHECK_SECONDS = 5.0
"""How often the file's bytes are compared though no change was announced: some file
systems tell the watcher nothing (network shares, Docker Desktop's shared folders) or not
every change (WSL2, where watchfiles polls file times in whole seconds, so a save within
the second of the one before it goes unseen). Reading a small file this often costs
nothing, and such a save is applied within this long instead of never."""

SETTLE_SECONDS = 1.0
"""How long a file that does not parse (missing, empty, cut off) must stay unchanged before
it is judged. An editor that saves in place truncates the file, then writes it, and a save
may delete the file before writing it anew: the states between are not the user's config,
and refusing each would send a ``config.rejected`` to every open stream for a save that is
fine."""

SETTLE_LIMIT_SECONDS = 10.0
"""A file still changing after this long is judged as it then is."""


async def _settled(path: Path, now: bytes | None, stop: asyncio.Event) -> bytes | None:
    """``now``, or, while it does not parse as JSON, the bytes once they stop changing."""
    waited = 0.0
    while not _parses(now) and waited < SETTLE_LIMIT_SECONDS:
        try:
            await asyncio.wait_for(stop.wait(), SETTLE_SECONDS)
            return now  # stopping: the caller judges nothing more
        except TimeoutError:
            waited += SETTLE_SECONDS
        again = _read(path)
        if again == now:
            break
        now = again
    return now


def _parses(data: bytes | None) -> bool:
    try:
        json.loads(data or b"")
    except (ValueError, RecursionError):  # not JSON, cut off, empty, not UTF-8, too deep
        return False
    return True


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
