"""The directory of ``PROMETHEUS_MULTIPROC_DIR``, where prometheus-client keeps each
worker's values in files of its own under several uvicorn workers (``proxy.metrics``):
made and checked at start (``multiproc_dir``), judged without being touched by ``config
check`` (``check_multiproc_dir``), and cleared of what earlier processes left there that
would be wrong (``drop_leftovers``).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from proxy.settings import SettingsError

__all__ = ["MULTIPROC_ENV", "check_multiproc_dir", "drop_leftovers", "multiproc_dir"]

log = logging.getLogger("cascade.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# prometheus-client's per-process file: "{type}[_{mode}]_{pid}.db"
_PROCESS_FILE = re.compile(r"(?P<kind>.+)_(?P<pid>\d+)\.db")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's, or no pid at all: leave it
        return True
    return True


def drop_leftovers(directory: str) -> None:
    """Before this process makes a metric, clear what earlier processes left in
    ``directory`` that would be wrong, and say what stays.

    - A file bearing this process's pid is an earlier process's (a restarted container's
      worker gets the pid the last run's had): prometheus-client would open it and go on from
      its values, so it is removed.
    - A live gauge (``cascade_inflight_requests``) of a pid no process has is a worker that
      ended without ``close`` (killed), or a previous run's: it would count its requests in
      flight for ever, so it is removed, as ``close`` would have.
    - Counters and histograms of pids no process has stay: a worker that died during this
      run still counted them. They may as well be a previous run's, added to this one's
      totals, which no file tells apart: one warning says how many processes' figures are
      summed in, and README says to empty the directory before each start.

    Workers start together, so a file may go while another reads the directory: what is
    already gone is passed over.
    """
    me = os.getpid()
    gone: set[int] = set()
    for path in Path(directory).iterdir():
        found = _PROCESS_FILE.fullmatch(path.name)
        if found is None:
            continue
        pid = int(found["pid"])
        if pid != me and _running(pid):
            continue
        if pid == me or found["kind"].startswith("gauge_live"):
            path.unlink(missing_ok=True)
        else:
            gone.add(pid)
    if gone:
        log.warning(
            "%s: %s holds the figures of %d process%s no longer running (an earlier run's, or "
            "workers that died): /metrics adds their counts to this run's; empty it before "
            "each start",
            MULTIPROC_ENV,
            directory,
            len(gone),
            "" if len(gone) == 1 else "es",
        )


def multiproc_dir() -> str | None:
    """The directory ``PROMETHEUS_MULTIPROC_DIR`` names (made when missing: prometheus-client
    writes there from the first metric on), cleared of leftovers; None when unset. One it
    cannot use is a :class:`SettingsError`."""
    path = os.environ.get(MULTIPROC_ENV) or None
    if path is not None:
        try:  # a file there, or no permission: one line at start, not a traceback
            os.makedirs(path, exist_ok=True)
            if not os.access(path, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied")
        except OSError as exc:
            raise SettingsError(
                f"{MULTIPROC_ENV}: {path} is not a directory this process can write"
                f" ({exc.strerror or exc})"
            ) from None
        drop_leftovers(path)
    return path


def check_multiproc_dir() -> None:
    """What :func:`multiproc_dir` refuses, judged without making the directory or clearing
    it: one that is a file, lies below one, or cannot be written."""
    path = os.environ.get(MULTIPROC_ENV) or None
    if path is None:
        return
    near = Path(path).absolute()
    while not near.exists():  # makedirs starts from the nearest existing ancestor
        near = near.parent
    why = None
    if not near.is_dir():
        why = "File exists" if str(near) == str(Path(path).absolute()) else "Not a directory"
    elif not os.access(near, os.W_OK | os.X_OK):
        why = "Permission denied"
    if why:
        raise SettingsError(
            f"{MULTIPROC_ENV}: {path} is not a directory this process can write ({why})"
        )
