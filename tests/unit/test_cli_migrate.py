"""``cascade-proxy migrate`` stops the embedded server it started, however the run ends: a
failed migration (one line, exit 2) and a SIGTERM from a supervisor alike. A database it
cannot reach is exit 3, worth a retry, as no proxy is for ``sessions`` (README "CLI")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from proxy import cli, cli_run
from proxy.cli_api import EXIT_UNREACHABLE
from proxy.pgembed import EmbeddedUnavailable
from proxy.store.db import DatabaseUnavailable, PoolerMismatch
from proxy.store.migrations import MigrationError
from tests.unit.starts import SERVE, run_start


class _Embedded:
    def __init__(self) -> None:
        self.stopped = 0

    def cleanup(self) -> None:
        self.stopped += 1


def test_a_failed_migration_stops_the_embedded_server_and_says_why_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _Embedded()

    async def refused(dsn: str, **kwargs: Any) -> list[str]:
        raise MigrationError("migration 0022_lease_queue.sql failed: DuplicateFunctionError: …")

    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    monkeypatch.setattr(cli_run, "start_embedded", lambda data_dir: ("postgresql:///x", server))
    monkeypatch.setattr(cli_run, "run_migrations", refused)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["migrate"]) == 2
    assert server.stopped == 1  # not left running until (unless) the interpreter exits
    assert signal.getsignal(signal.SIGTERM) == before
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "cascade-proxy migrate: migration 0022_lease_queue.sql failed: DuplicateFunctionError: …"
    ]


def test_a_successful_migration_stops_the_embedded_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _Embedded()

    async def applied(dsn: str, **kwargs: Any) -> list[str]:
        return ["0001_init.sql"]

    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setattr(cli_run, "start_embedded", lambda data_dir: ("postgresql:///x", server))
    monkeypatch.setattr(cli_run, "run_migrations", applied)
    assert cli.main(["migrate"]) == 0
    assert server.stopped == 1
    assert "applied 1 migration(s): 0001_init.sql" in capsys.readouterr().out


_SIGTERMED = """
import asyncio, sys
from pathlib import Path
from proxy import cli, cli_run

stopped = Path(sys.argv[1])

class Embedded:
    def cleanup(self):
        stopped.write_text("stopped")

async def slow(dsn, **kwargs):
    Path(sys.argv[2]).write_text("migrating")
    await asyncio.sleep(60)
    return []

cli_run.start_embedded = lambda data_dir: ("postgresql:///x", Embedded())
cli_run.run_migrations = slow
raise SystemExit(cli.main(["migrate"]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_sigterm_or_ctrl_c_during_a_migration_stops_the_embedded_server(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Each signal ends the run with 128 + its number, the embedded server stopped, and
    no traceback: Ctrl-C is the user's choice, not a crash; SIGHUP is the terminal the
    command ran in closing."""
    stopped, started = tmp_path / "stopped", tmp_path / "started"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    child = subprocess.Popen(
        [sys.executable, "-c", _SIGTERMED, str(stopped), str(started)],
        env=env,
        cwd=Path(__file__).parents[2],
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert child.poll() is None, "the migrate process ended before migrating"
            assert time.monotonic() < deadline, "the migration never started"
            time.sleep(0.05)
        child.send_signal(sig)
        _, err = child.communicate(timeout=20)
        assert child.returncode == 128 + sig
        assert "Traceback" not in err.decode(), err.decode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    # Python's default SIGTERM ends the process without atexit: the server stayed up
    assert stopped.read_text() == "stopped"


def test_a_database_it_cannot_reach_is_named_by_where_its_url_came_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal said "(DATABASE_URL)" whatever gave the URL: the flag, which wins over
    the variable, or the embedded server this command started."""
    monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgresql://env:TOPSECRET@127.0.0.1:1/env")
    flag = "postgresql://flag:TOPSECRET@127.0.0.1:1/f"
    assert cli.main(["migrate", "--database-url", flag]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert "at postgresql://flag:***@127.0.0.1:1/f (--database-url): " in err, err
    assert "DATABASE_URL" not in err and "TOPSECRET" not in err, err
    assert cli.main(["migrate"]) == EXIT_UNREACHABLE
    assert "at postgresql://env:***@127.0.0.1:1/env (DATABASE_URL): " in capsys.readouterr().err
    monkeypatch.delenv("DATABASE_URL")
    server = _Embedded()
    monkeypatch.setattr(
        cli_run, "start_embedded", lambda data_dir: ("postgresql:///x?port=1", server)
    )
    assert cli.main(["migrate"]) == EXIT_UNREACHABLE
    assert server.stopped == 1
    err = capsys.readouterr().err
    assert " (the embedded server): " in err and "DATABASE_URL" not in err, err


@pytest.mark.parametrize(
    ("refusal", "status"),
    [
        (DatabaseUnavailable("cannot connect …: ConnectionRefusedError"), EXIT_UNREACHABLE),
        (DatabaseUnavailable("cannot connect …: CannotConnectNowError", "57P03"), 3),
        (DatabaseUnavailable("cannot connect …: TooManyConnectionsError", "53300"), 3),
        (DatabaseUnavailable("cannot connect …: InvalidPasswordError", "28P01"), 2),
        (DatabaseUnavailable("cannot connect …: InvalidCatalogNameError", "3D000"), 2),
        (PoolerMismatch("set CASCADE_DB_POOLER=transaction", "26000"), 2),
        (EmbeddedUnavailable(), 2),
        (MigrationError("the migrations' ledger cannot be made …"), 2),
    ],
)
def test_a_database_that_did_not_answer_is_told_from_one_a_setting_must_mend(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    refusal: Exception,
    status: int,
) -> None:
    """migrate said 2, a usage error, for a database that was down as for a password it
    refused: a script retrying the one (3, as for no proxy) gives up on the other (2)."""

    async def refused(dsn: str, **kwargs: Any) -> list[str]:
        raise refusal

    monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@127.0.0.1:1/d")
    monkeypatch.setattr(cli_run, "run_migrations", refused)
    assert cli.main(["migrate"]) == status
    assert capsys.readouterr().err == f"cascade-proxy migrate: {refusal}\n"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@127.0.0.1:notaport/d",  # a port that is no number
        "mysql://u@127.0.0.1/d",  # another scheme
        "postgresql://u@127.0.0.1:1/d?sslmode=bogus",  # a parameter asyncpg refuses
    ],
)
def test_a_database_url_that_is_none_is_a_setting_to_mend(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """A URL asyncpg cannot read was said as a database that did not answer, 3, which a
    script retries for ever: no retry mends a typo in ``DATABASE_URL``."""
    monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    assert cli.main(["migrate", "--database-url", url]) == 2
    err = capsys.readouterr().err
    # another scheme is refused with the settings, before asyncpg reads it
    named = "migrate: --database-url: not a postgresql://" if url.startswith("mysql") else "(--"
    assert named in err, err


def test_a_certificate_the_url_names_that_does_not_load_is_a_setting_to_mend(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A certificate file the URL names that is missing or no certificate was said as a
    database that did not answer, 3, which a script retries for ever; asyncpg reads it before
    it asks any server. A Unix socket not there yet, the same FileNotFoundError, stays 3."""
    monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    junk = tmp_path / "junk.pem"
    junk.write_text("no certificate")
    for query in (
        f"sslmode=verify-ca&sslrootcert={tmp_path / 'missing.pem'}",
        f"sslmode=require&sslcert={junk}&sslkey={junk}",
    ):
        url = f"postgresql://u@127.0.0.1:1/d?{query}"
        assert cli.main(["migrate", "--database-url", url]) == 2, capsys.readouterr().err
        assert "(--database-url): " in capsys.readouterr().err
    socket = f"postgresql://u@/d?host={tmp_path}&port=1"
    assert cli.main(["migrate", "--database-url", socket]) == EXIT_UNREACHABLE
    assert "FileNotFoundError" in capsys.readouterr().err


def test_a_server_that_refuses_the_tls_the_url_requires_is_a_setting_to_mend(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sslmode=require`` against a server (or pooler) without TLS, which answers the TLS
    request "N", was said as a database that did not answer, 3: it answered, and says the
    same to every retry until the URL's sslmode or the server's TLS is mended. So does
    another service on the port (an HTTP server), which answers neither yes nor no, even to
    the default sslmode, prefer."""
    import socket
    import threading

    for answer, sslmode in ((b"N", "require"), (b"HTTP/1.1 400 Bad Request\r\n\r\n", "prefer")):
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]

        def reply(listener: socket.socket = listener, answer: bytes = answer) -> None:
            with listener:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(8)  # the SSLRequest
                    conn.sendall(answer)
                    conn.recv(1)

        served = threading.Thread(target=reply, daemon=True)
        served.start()
        monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
        url = f"postgresql://u@127.0.0.1:{port}/d?sslmode={sslmode}"
        assert cli.main(["migrate", "--database-url", url]) == 2
        assert "rejected SSL upgrade" in capsys.readouterr().err
        served.join(5)


class _LostConnection:
    """A connection whose server goes away at the ``fail_at``-th statement (a restart, a
    ``pg_terminate_backend``), as asyncpg reports it."""

    def __init__(self, fail_at: int, error: Exception) -> None:
        self.statements, self.fail_at, self.error = 0, fail_at, error

    def transaction(self) -> Any:
        import contextlib

        @contextlib.asynccontextmanager
        async def begun() -> Any:
            yield

        return begun()

    async def execute(self, *args: Any) -> None:
        self.statements += 1
        if self.statements >= self.fail_at:
            raise self.error

    async def fetchval(self, *args: Any) -> None:
        return None

    def is_closed(self) -> bool:
        return True


def _migrate_unreachable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], conn: _LostConnection
) -> str:
    """``migrate`` run on ``conn`` exits as for an unreachable database; its stderr."""
    from proxy.store import migrations

    async def connected(dsn: str, **kwargs: Any) -> _LostConnection:
        return conn

    monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@127.0.0.1:1/d")
    monkeypatch.setattr(migrations, "connect", connected)
    assert cli.main(["migrate"]) == EXIT_UNREACHABLE
    return capsys.readouterr().err


@pytest.mark.parametrize("fail_at", [1, 7])  # making the ledger; a migration's own statement
@pytest.mark.parametrize("error", ["ConnectionDoesNotExistError", "AdminShutdownError"])
def test_a_connection_lost_while_migrating_is_a_database_to_try_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fail_at: int, error: str
) -> None:
    """A server that went away mid-run was said as a role that may not create tables, or as
    a migration that failed, exit 2: a retry, once it is back, migrates."""
    import asyncpg

    conn = _LostConnection(fail_at, getattr(asyncpg, error)("the server went away"))
    err = _migrate_unreachable(monkeypatch, capsys, conn)
    assert err.count("\n") == 1 and error in err and "(DATABASE_URL)" in err, err
    assert "role" not in err and "failed" not in err, err


@pytest.mark.parametrize("fail_at", [1, 7])
@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        "InterfaceError",  # asyncpg refusing a statement on a connection that closed
    ],
)
def test_a_connection_lost_as_no_server_error_is_a_database_to_try_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fail_at: int, error: Any
) -> None:
    """A lost socket reaches a statement as an OSError, or as asyncpg's InterfaceError once
    the connection is closed, not as a server's error: migrate ended in a traceback, exit 1,
    where a lost server is 3, a retry once it is back."""
    import asyncpg

    if isinstance(error, str):
        error = asyncpg.InterfaceError("cannot call Connection.execute(): connection is closed")
    conn = _LostConnection(fail_at, error)
    err = _migrate_unreachable(monkeypatch, capsys, conn)
    assert err.count("\n") == 1 and type(error).__name__ in err and "(DATABASE_URL)" in err, err


def test_a_data_directory_that_cannot_be_made_is_a_setting_to_mend(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``CASCADE_DATA_DIR`` where no directory can be made (a file in the way, no
    permission) was said as a database that did not answer, 3: no retry mends it."""
    from proxy import pgembed

    in_the_way = tmp_path / "file"
    in_the_way.write_text("")
    monkeypatch.delenv("CASCADE_LOG_FORMAT", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("CASCADE_DATA_DIR", str(in_the_way / "cascade"))
    monkeypatch.setattr(pgembed, "require_embedded", lambda: None)  # as if installed
    assert cli.main(["migrate"]) == 2
    assert "(CASCADE_DATA_DIR)" in capsys.readouterr().err


def test_help_names_migrates_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    """``migrate --help`` said nothing of its statuses, which tell a retry (3) from a
    setting to mend (2)."""
    with pytest.raises(SystemExit):
        cli.main(["migrate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "2 a setting to mend" in out and f"{EXIT_UNREACHABLE} a database that did" in out, out
    # each setting that exits 2 is named (DataDirUnusable, PoolerMismatch, UnreadableUrl's)
    for setting in ("CASCADE_DATA_DIR", "CASCADE_DB_POOLER", "a certificate"):
        assert setting in out, out


def test_serve_exits_as_migrate_does_for_a_url_asyncpg_cannot_read() -> None:
    """A setting to mend is 2 for both (``serve`` said 3, a database to retry)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/"),
        "DATABASE_URL": "postgresql://u@127.0.0.1:1/db?sslmode=bogus",
    }
    for command in (SERVE, ["-m", "proxy", "migrate"]):
        refused = run_start(command, env)
        assert refused.returncode == 2, refused.stderr
        assert "sslmode" in refused.stderr
