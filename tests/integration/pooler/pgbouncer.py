"""A PgBouncer in transaction mode in front of the tests' PostgreSQL: Debian's ``pgbouncer``
(``.ci/run`` installs it), started as a subprocess on a free loopback port.

Every database of the server is reachable through it under its own name (``* =``), so a
test's ``t_<uuid>`` database is too: :meth:`PgBouncer.pooled` turns a direct DSN into the one
through the pooler. Clients are trusted (loopback only); the server login uses the password
from the direct DSN, written to the auth file, as a deployment's ``userlist.txt`` holds it.
The server's prepared-statement support (``max_prepared_statements``, PgBouncer 1.21+) is
off, as in PgBouncer's own default before 1.22 and in RDS Proxy: a client that relies on
named prepared statements across transactions fails, as it would there.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import asyncpg

from bench.common import free_port
from proxy.settings import Settings

__all__ = ["PgBouncer", "find_pgbouncer", "routed_through", "start_pgbouncer"]

_SBIN = ("/usr/sbin", "/usr/local/sbin")


def find_pgbouncer() -> str | None:
    """The ``pgbouncer`` binary (Debian installs it in /usr/sbin, off a user's PATH)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
    return shutil.which("pgbouncer", path=path)


class PgBouncer:
    """A running PgBouncer; ``port`` is where clients connect on 127.0.0.1."""

    def __init__(
        self,
        port: int,
        user: str,
        log: Path,
        server: tuple[str, int],
        launch: Callable[[], subprocess.Popen[bytes]] | None = None,
    ) -> None:
        self.port = port
        self.user = user
        self.log = log
        self.server = server  # the PostgreSQL it pools: host (or socket dir) and port
        self._launch = launch
        self.proc = launch() if launch is not None else None

    async def console(self, command: str) -> None:
        """Run ``command`` (``PAUSE``, ``RESUME`` …) on its admin console, as ``user``."""
        conn = await asyncpg.connect(
            host="127.0.0.1", port=self.port, user=self.user, database="pgbouncer"
        )
        try:
            await conn.execute(command)  # no arguments: the simple protocol the console takes
        finally:
            await conn.close()

    def stop(self) -> None:
        """End the process (SIGTERM, then SIGKILL): every client's connection is cut."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Stop it and start it again on the same port: a restart its clients see as their
        connections cut, then refused until it listens again."""
        assert self._launch is not None
        self.stop()
        self.proc = self._launch()
        _wait_listening(self.proc, self.port, self.log)

    def pooled(self, direct_dsn: str) -> str:
        """``direct_dsn``'s database and user, through this PgBouncer."""
        parts = urlsplit(direct_dsn)
        dbname = unquote(parts.path.lstrip("/")) or "postgres"
        return f"postgresql://{quote(self.user, safe='')}@127.0.0.1:{self.port}/{quote(dbname)}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _server(dsn: str) -> tuple[str, int, str, str]:
    """(host or socket directory, port, user, password) of a ``postgresql://`` DSN, the
    socket form ``postgresql://postgres:@/postgres?host=/tmp/x`` included."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    host = (query.get("host") or [parts.hostname or "localhost"])[0]
    port = int((query.get("port") or [parts.port or 5432])[0])
    user = unquote(parts.username or "") or (query.get("user") or ["postgres"])[0]
    password = unquote(parts.password or "") or (query.get("password") or [""])[0]
    return host, port, user, password


def _version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    found = re.search(r"PgBouncer (\d+)\.(\d+)", out.stdout)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _run_as(host: str) -> str | None:
    """PgBouncer refuses to run as root: the user that may reach the server's socket
    directory (its owner: the embedded server's is private to it), else ``nobody``."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/"):
        return pwd.getpwuid(os.stat(host).st_uid).pw_name
    return "nobody"


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited with {proc.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"pgbouncer did not listen on {port} within 15 s:\n{log.read_text()}")


@contextlib.contextmanager
def start_pgbouncer(
    binary: str, direct_dsn: str, *, pool_size: int = 20, round_robin: bool = False
) -> Iterator[PgBouncer]:
    """Start PgBouncer (``pool_mode = transaction``) in front of ``direct_dsn``'s server, with
    at most ``pool_size`` server connections per database; stop it at the end. With
    ``round_robin`` it lends its idle server connections in turn rather than the most recently
    used first, so a client's consecutive transactions run on different ones whenever the
    database's pool holds two or more."""
    host, server_port, user, password = _server(direct_dsn)
    root = Path(tempfile.mkdtemp(prefix="cascade-pgbouncer-"))
    port = free_port()
    log = root / "pgbouncer.log"
    (root / "userlist.txt").write_text(f'"{user}" "{password}"\n')
    settings = {
        "listen_addr": "127.0.0.1",
        "listen_port": str(port),
        "unix_socket_dir": "",
        "auth_type": "trust",
        "auth_file": str(root / "userlist.txt"),
        "pool_mode": "transaction",
        "default_pool_size": str(pool_size),
        "max_client_conn": "1000",
        "pidfile": "",
        # A dropped t_<uuid> database's pool goes soon rather than after an hour.
        "autodb_idle_timeout": "10",
        # After a refused server login (a test takes its database away and back), clients
        # are refused for this long: 15 s by default, longer than a test waits.
        "server_login_retry": "1",
        "server_round_robin": "1" if round_robin else "0",
        "admin_users": user,  # its console (PAUSE, RESUME), for a test's faults
    }
    if _version(binary) >= (1, 21):  # unknown to older versions, which refuse the file
        settings["max_prepared_statements"] = "0"
    lines = ["[databases]", f"* = host={host} port={server_port}", "[pgbouncer]"]
    lines += [f"{key} = {value}" for key, value in settings.items()]
    ini = root / "pgbouncer.ini"
    ini.write_text("\n".join(lines) + "\n")
    run_as = _run_as(host)
    command = [binary, *(["-u", run_as] if run_as else []), str(ini)]
    if run_as:
        entry = pwd.getpwnam(run_as)
        for path in (root, *root.iterdir()):
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def launch() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    bouncer = PgBouncer(port, user, log, (host, server_port), launch)
    try:
        assert bouncer.proc is not None
        _wait_listening(bouncer.proc, port, log)
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(root, ignore_errors=True)


def _route(bouncer: PgBouncer) -> Callable[[Settings], Settings]:
    def route(settings: Settings) -> Settings:
        if not settings.database_url or settings.db_pooler == "transaction":
            return settings  # embedded, or already behind a pooler
        if _server(settings.database_url)[:2] != bouncer.server:
            return settings  # another PostgreSQL than the one this PgBouncer pools
        return settings.model_copy(
            update={
                "database_url": bouncer.pooled(settings.database_url),
                "database_listen_url": settings.database_url,
                "db_pooler": "transaction",
            }
        )

    return route


@contextlib.contextmanager
def routed_through(bouncer: PgBouncer) -> Iterator[None]:
    """Within the block, every ``ProxyServer`` started runs as a deployment behind a pooler
    does (README, Behind a connection pooler): ``DATABASE_URL`` is its database through
    ``bouncer``, ``CASCADE_DB_POOLER=transaction``, ``DATABASE_LISTEN_URL`` the database
    itself. What a test reads back to check still goes straight to the database."""
    # Imported here: the api conftest imports the app, which this module's users may not need.
    from tests.integration.api.conftest import ROUTES

    route = _route(bouncer)
    ROUTES.append(route)
    try:
        yield
    finally:
        ROUTES.remove(route)
