"""What ``cascade-proxy`` runs once its arguments are read (``proxy.cli``): serve, migrate,
and the session and memory clients, each mistake in the settings one line, never a traceback.

The heavy imports (pydantic, the app, httpx, asyncpg) live here, not in ``proxy.cli``, the
console script's module: ``proxy.cli`` imports this only inside its Ctrl-C guard, so an
interrupt while they load ends the command as one, without a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import math
import os
import signal
import sys

from pydantic import ValidationError
from uvicorn.config import STARTUP_FAILURE

from proxy import DEFAULT_CONFIG
from proxy.app import check_start, create_app
from proxy.banner import client_origin
from proxy.cli import option_names
from proxy.cli_api import say
from proxy.cli_memory import run_memory
from proxy.cli_sessions import run_sessions
from proxy.cli_url import has_credentials, has_query, origin_of
from proxy.config import ConfigError, config_warnings
from proxy.config_watch import load_named
from proxy.listen import InsecureListen
from proxy.metrics import Metrics
from proxy.pgembed import DataDirUnusable, EmbeddedUnavailable, require_embedded, start_embedded
from proxy.refusals import STARTING
from proxy.server import serve
from proxy.settings import Listen, Settings, SettingsError, settings_error
from proxy.settings_names import unknown_variables
from proxy.stopping import STORE_SECONDS
from proxy.store.db import (
    DatabaseUnavailable,
    PoolerMismatch,
    TlsRefused,
    UnreadableUrl,
    pooler_kwargs,
)
from proxy.store.migrations import MigrationError, run_migrations
from proxy.tracing_settings import check_tracing
from proxy.transport import check_ca_files

__all__ = ["refuse", "run"]


def run(args: argparse.Namespace) -> int:
    """Run the command ``args`` names; its exit status. A refused setting or config file is
    one line (``refuse``) and exit status 2, as is a database ``migrate`` cannot migrate or
    log in to; one it cannot reach is 3 (``_database_status``). ``serve`` refuses a database
    in its start, once it listens: that is one line and the status ``migrate`` gives it
    (``_serve``); a port held is uvicorn's failed-start status, 3 (``proxy.server.serve``)."""
    command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
    try:
        if args.command not in ("serve", "migrate", "config"):
            return _client_command(args)
        settings = _settings(args)
        if args.command == "config":
            return _check_config(settings)
        if args.command == "serve":
            return _serve(settings)
        return _migrate(settings)
    except ValidationError as exc:  # a setting from the environment: named, not echoed
        refuse(f"cascade-proxy {command}: {settings_error(exc)}")
        return 2
    except DatabaseUnavailable as exc:
        refuse(f"cascade-proxy {command}: {exc}")
        return _database_status(exc)
    except (ConfigError, SettingsError, MigrationError, InsecureListen) as exc:
        # a mistake in the config file or the environment: say which, without a traceback
        refuse(f"cascade-proxy {command}: {exc}")
        return 2


# SQLSTATE classes of a server that answered and refused what a setting names: invalid
# authorization (the role, its password), and no such database (3D000).
_SETTING_STATES = ("28", "3D")


def _database_status(exc: DatabaseUnavailable) -> int:
    """2 for a database a setting must mend, which no retry does: no embedded server
    installed or no directory for it, a URL that cannot be read, TLS the server refuses, a
    pooler ``CASCADE_DB_POOLER`` does not name, a role or database the server refused; 3 for one
    that did not answer or is not up yet (a refused connection, a timeout, a server
    starting or full), worth a retry as no proxy is for ``sessions``."""
    refused = (exc.sqlstate or "")[:2] in _SETTING_STATES
    mend = EmbeddedUnavailable | DataDirUnusable | UnreadableUrl | PoolerMismatch | TlsRefused
    return 2 if refused or isinstance(exc, mend) else 3


def _check_config(settings: Settings) -> int:
    """``config check``: the file loaded as a start or a reload loads it, and judged in this
    environment by the checks ``serve`` makes before it starts (``proxy.app.check_start``):
    what ``serve`` refuses (an egress proxy the transport cannot use, an ``SSL_CERT_FILE``
    that does not load, listening beyond loopback without proxy keys, the tracing and
    metrics settings, no database at all) raises, and what it
    warns of (a ``CASCADE_*`` variable nothing reads, a ``caFile`` that does not load, the
    config's own warnings) is printed, one a line."""
    path = settings.config
    cfg = load_named(path, os.environ)
    _, open_listen = check_start(settings, cfg)
    check_tracing(settings.tracing, os.environ)
    Metrics.check_env()
    if not settings.database_url:
        require_embedded()
    if path is None:
        print(f"no config file (no --config, CASCADE_CONFIG or {DEFAULT_CONFIG}): the defaults")
    else:
        print(f"{path}: valid")
    warnings = [unknown_variables(os.environ, cfg.variables()), *open_listen]
    warnings += check_ca_files(None, cfg) + config_warnings(cfg, os.environ)
    for warning in filter(None, warnings):
        print(f"warning: {warning}")
    return 0


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {
        k: v
        for k, v in {
            "host": getattr(args, "host", None),
            "port": getattr(args, "port", None),
            "config": getattr(args, "config", None),
            "allow_unauthenticated": getattr(args, "allow_unauthenticated", None),
        }.items()
        if v is not None
    }
    # given to the constructor, not copied over: a variable a flag overrides is not judged
    settings = Settings(**overrides).with_default_config()
    if url := getattr(args, "database_url", None):
        settings = settings.with_database_url(url, "--database-url")
    return settings


def _serve(settings: Settings) -> int:
    """Serve until stopped; uvicorn's own ``timeout_graceful_shutdown`` cancels what still
    runs :data:`~proxy.stopping.STORE_SECONDS` after the stop's grace (a request that is no
    stream, waiting on its provider), so the stop has a bound whatever runs. A start the
    database refused exits as ``migrate`` does for it: 2 for a setting to mend (a URL
    asyncpg cannot read, the role, a migration refused), 3 for a database that did not
    answer, uvicorn's failed-start status."""
    app = create_app(settings)  # configures logging (proxy.logs), uvicorn's loggers included
    try:
        status = serve(
            app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=math.ceil(settings.stop_grace_seconds + STORE_SECONDS),
        )
    except SystemExit as exc:  # uvicorn's failed start
        status = exc.code if isinstance(exc.code, int) else 1
        if status != STARTUP_FAILURE or STARTING.refused is None:
            raise
    refused, STARTING.refused = STARTING.refused, None
    if status != STARTUP_FAILURE or refused is None:
        return status
    return _database_status(refused) if isinstance(refused, DatabaseUnavailable) else 2


def _migrate(settings: Settings) -> int:
    """Apply the migrations; the embedded server this started is stopped whatever happens
    (a failed migration, SIGTERM from a supervisor or ``timeout``, SIGHUP from the terminal
    it ran in closing), not left running."""
    ending = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    previous = {sig: signal.signal(sig, _terminated) for sig in ending}  # as Ctrl-C: finally runs
    dsn, server = (settings.database_url, None)
    try:
        if not dsn:
            dsn, server = start_embedded(settings.data_dir)
        pooler = pooler_kwargs(settings.db_pooler)
        applied = asyncio.run(run_migrations(dsn, setting=settings.database_source(), **pooler))
    finally:
        if server is not None:
            server.cleanup()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
    return 0


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _sessions(args: argparse.Namespace) -> int:
    """Of the server's settings only ``CASCADE_HOST`` and ``CASCADE_PORT`` are read, and only
    for the default URL: one this command never uses (``CASCADE_LOG_LEVEL``) cannot stop it.

    A user or password in the URL (Basic auth, for a reverse proxy in front) and an API key
    are refused together: a request has one Authorization header, and httpx filled it with
    the Basic auth, dropping the key without a word. Each is named by where it came from,
    neither is quoted."""
    args.json = getattr(args, "json", False)
    given, url_from = _given(args, "url", "--url", "CASCADE_URL")
    if not given:
        listen = Listen()
        given, url_from = client_origin(listen.host, listen.port), "CASCADE_HOST"
    if given != given.strip():  # refused, not trimmed: a script gave what it did not mean
        say(
            f"cascade-proxy {args.command} {args.action}: the URL ({url_from}) has blanks "
            "around it (a space, a tab or a line break), which no URL has; give it without"
        )
        return 2
    url = origin_of(given)
    if not _utf8(url):  # the shell's bytes as surrogates: httpx's quoting would raise
        say(
            f"cascade-proxy {args.command} {args.action}: the URL ({url_from}) holds bytes "
            "that are not UTF-8, which no request carries"
        )
        return 2
    if has_query(url):  # not quoted: a query may hold a token
        say(
            f"cascade-proxy {args.command} {args.action}: the URL ({url_from}) has a query or "
            "a fragment ('?' or '#'), which the API's paths would land in; give the proxy's "
            "origin, http://host:port (with the path of a prefix it is mounted under)"
        )
        return 2
    key, key_from = _given(args, "api_key", "--api-key", "CASCADE_API_KEY", "OPENAI_API_KEY")
    if key and has_credentials(url):
        say(
            f"cascade-proxy {args.command} {args.action}: the URL ({url_from}) has a user or "
            f"password, sent as Basic auth, and an API key is given ({key_from}): a request "
            "has one Authorization header, so one of them would be dropped; give only one"
        )
        return 2
    return (run_memory if args.command == "memory" else run_sessions)(args, url, key, key_from)


def _given(args: argparse.Namespace, name: str, flag: str, *variables: str) -> tuple[str, str]:
    """The value of the flag ``name``, else of the first of ``variables`` set, and which
    it was; ``("", "")`` when none is."""
    if value := getattr(args, name, None):
        return value, flag
    for variable in variables:
        if value := os.environ.get(variable):
            return value, variable
    return "", ""


def _client_command(args: argparse.Namespace) -> int:
    """``sessions`` or ``memory``, whose output is often piped into ``head`` or ``less``: a
    reader that stops early closes the pipe, which ends the command quietly (a shell's
    SIGPIPE status, 141) instead of a BrokenPipeError traceback on stderr. A character the
    output's encoding lacks (a latin-1 terminal) is written as an escape, not a traceback."""
    if sys.stdout is None:  # `cascade-proxy … >&-`: print() would write nothing, silently
        return _unwritten(args, "stdout is closed")
    if unsent := _not_utf8(args):  # httpx's encoding, or the path's quoting, would raise
        say(
            f"cascade-proxy {args.command} {args.action}: {unsent} holds bytes that are not "
            "UTF-8, which no request carries"
        )
        return 2
    if isinstance(sys.stdout, io.TextIOWrapper):  # a terminal not in UTF-8: \u escapes
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        status = _sessions(args)
        sys.stdout.flush()  # a short answer is written here, not at exit, so it is caught too
    except BrokenPipeError:
        _to_devnull()
        return 141
    except OSError as exc:  # a full disk (`> /dev/full`), a file system gone
        _to_devnull()
        return _unwritten(args, exc.strerror or str(exc))
    return status


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: no surrogate the shell made of a byte outside it."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _not_utf8(args: argparse.Namespace) -> str:
    """The option or argument whose value the shell handed over as surrogates (bytes not in
    UTF-8), named, not quoted (it may be the key); empty when there is none."""
    for name, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and not _utf8(text):
                return option_names(args).get(name, name)
    return ""


def _to_devnull() -> None:
    """Python flushes stdout again at exit: point it at /dev/null so that write succeeds,
    instead of a second error, or a traceback, after the command's own line."""
    with contextlib.suppress(OSError, ValueError):  # a stdout with no descriptor
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _unwritten(args: argparse.Namespace, why: str) -> int:
    """Say that the answer could not be written: exit status 1, as the command failed."""
    say(f"cascade-proxy {args.command} {args.action}: cannot write the answer: {why}")
    return 1


def refuse(message: str) -> None:
    """Say why the command cannot run: one line on stderr, or one JSON log line (``say``)."""
    say(message)
