"""``cascade-proxy``: serve, migrate, and a small session client. No logic lives here.

Every flag's help names the environment variable it overrides and its default; settings
not given as flags are read from the environment (``proxy.settings``). ``sessions …`` talks
to a running proxy over HTTP (``proxy.cli_sessions``), and so does ``memory …``
(``proxy.cli_memory``).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from proxy import __version__
from proxy.app import create_app
from proxy.auth import InsecureListen
from proxy.banner import client_origin
from proxy.cli_memory import add_memory_parser, run_memory
from proxy.cli_sessions import has_credentials, origin_of, run_sessions
from proxy.config import ConfigError
from proxy.logs import configure_logging, format_from_env
from proxy.pgembed import start_embedded
from proxy.server import INTERRUPTED, serve
from proxy.settings import DEFAULT_CONFIG, Listen, Settings, SettingsError, settings_error
from proxy.store.db import DatabaseUnavailable, MigrationError, pooler_kwargs, run_migrations

__all__ = ["main"]

_DATABASE_URL = (
    "PostgreSQL URL (env DATABASE_URL; default: an embedded PostgreSQL in "
    "$CASCADE_DATA_DIR, else $XDG_DATA_HOME/cascade, else ~/.local/share/cascade)"
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cascade-proxy",
        description="Cascade: an OpenAI-compatible proxy that manages an agent's context "
        "window. Settings not given as flags come from the environment; each "
        "flag's help names its variable and default.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the proxy", description="Run the proxy.")
    serve.add_argument(
        "--host",
        help="address to listen on (env CASCADE_HOST; default "
        "127.0.0.1); a non-loopback one needs proxy keys (auth.keys) or "
        "--allow-unauthenticated",
    )
    serve.add_argument(
        "--port", type=_port, help="TCP port to listen on (env CASCADE_PORT; default 8080)"
    )
    serve.add_argument(
        "--config",
        type=Path,
        help="agents.json to read and watch (env "
        f"CASCADE_CONFIG; default {DEFAULT_CONFIG} when it exists, else "
        "built-in defaults)",
    )
    serve.add_argument("--database-url", help=_DATABASE_URL)
    serve.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        default=None,
        help="listen on a non-loopback address without proxy keys, with a "
        "warning (env CASCADE_ALLOW_UNAUTHENTICATED=1; default: refuse)",
    )
    migrate = sub.add_parser(
        "migrate",
        help="apply database migrations and exit",
        description="Apply pending database migrations and exit.",
    )
    migrate.add_argument("--database-url", help=_DATABASE_URL)
    sess = sub.add_parser(
        "sessions",
        help="inspect and manage the sessions of a running proxy",
        description="Inspect and manage the sessions of a running proxy, as the tenant of "
        "the API key given.",
    )
    _client_options(sess)
    ssub = sess.add_subparsers(dest="action", required=True, metavar="ACTION")
    helps = {
        "ls": "list sessions, most recently used first",
        "show": "a session's occupancy, limits, counts and current summary",
        "messages": "a session's stored messages",
        "compact": "fold the session's older messages into a summary now",
        "branch": "copy a session into a new, independent one",
        "reset": "forget a session's history (the next request starts it again)",
        "rm": "delete a session and everything stored for it",
    }
    for action, text in helps.items():
        a = ssub.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".")
        _client_options(a)
        if action != "ls":
            a.add_argument("id", type=_session_id, help="the session id")
        if action in ("ls", "messages"):
            a.add_argument(
                "--limit",
                type=int,
                default=100 if action == "ls" else 1000,
                help="how many to list (default %(default)s)",
            )
            a.add_argument(
                "--offset", type=int, default=0, help="how many to skip first (default 0)"
            )
        if action == "messages":
            a.add_argument(
                "--all",
                action="store_true",
                help="include superseded "
                "messages, replaced by a divergent resend (default: live only)",
            )
        if action == "branch":
            a.add_argument(
                "--new-id", type=_session_id, help="the new session's id (default: ID-branch-<hex>)"
            )
    add_memory_parser(sub, _client_options)
    return p


def _client_options(p: argparse.ArgumentParser) -> None:
    """The options of ``sessions`` and of each of its actions, so they may come before or
    after the action; SUPPRESS leaves an option not given out of the namespace, so an
    action's default does not overwrite what was given before it."""
    default = argparse.SUPPRESS
    p.add_argument(
        "--url",
        default=default,
        help="the proxy's origin (env CASCADE_URL; default "
        "http://$CASCADE_HOST:$CASCADE_PORT, i.e. http://127.0.0.1:8080); the client "
        "base URL, http://host:port/v1, is taken as its origin",
    )
    p.add_argument(
        "--api-key",
        default=default,
        help="the bearer token to send: a proxy key, "
        "or in pass-through mode the agent's own key (env CASCADE_API_KEY, else "
        "OPENAI_API_KEY; default none)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        default=default,
        help="print the API's JSON instead of a table (default: a table)",
    )


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
    settings = Settings().model_copy(update=overrides).with_default_config()
    if url := getattr(args, "database_url", None):
        settings = settings.with_database_url(url, "--database-url")
    return settings


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:  # argparse would say "invalid _port value"
        port = 0
    if not 1 <= port <= 65535:  # uvicorn would take 99999 and listen somewhere else
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (1-65535)")
    return port


def _session_id(text: str) -> str:
    """A session id as given; the proxy checks the rest. An empty one would name no session
    in the URL (``GET /v1/sessions/``) or, for ``--new-id``, be dropped for a generated id."""
    if not text:
        raise argparse.ArgumentTypeError("an empty session id")
    return text


def _serve(settings: Settings) -> int:
    app = create_app(settings)  # configures logging (proxy.logs), uvicorn's loggers included
    return serve(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,
        access_log=False,
    )


def _migrate(settings: Settings) -> int:
    """Apply the migrations; the embedded server this started is stopped whatever happens
    (a failed migration, SIGTERM from a supervisor or ``timeout``), not left running."""
    previous = signal.signal(signal.SIGTERM, _terminated)  # as Ctrl-C: the finally runs
    dsn, server = (settings.database_url, None)
    try:
        if not dsn:
            dsn, server = start_embedded(settings.data_dir)
        pooler = pooler_kwargs(settings.db_pooler)
        applied = asyncio.run(run_migrations(dsn, setting=settings.database_source(), **pooler))
    finally:
        if server is not None:
            server.cleanup()
        signal.signal(signal.SIGTERM, previous)
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
    url = origin_of(given)
    key, key_from = _given(args, "api_key", "--api-key", "CASCADE_API_KEY", "OPENAI_API_KEY")
    if key and has_credentials(url):
        print(
            f"cascade-proxy {args.command} {args.action}: the URL ({url_from}) has a user or "
            f"password, sent as Basic auth, and an API key is given ({key_from}): a request "
            "has one Authorization header, so one of them would be dropped; give only one",
            file=sys.stderr,
        )
        return 2
    return (run_memory if args.command == "memory" else run_sessions)(args, url, key)


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
    if isinstance(sys.stdout, io.TextIOWrapper):  # a terminal not in UTF-8: \u escapes
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        status = _sessions(args)
        sys.stdout.flush()  # a short answer is written here, not at exit, so it is caught too
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that write succeeds.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command not in ("serve", "migrate"):
            return _client_command(args)
        settings = _settings(args)
        if args.command == "serve":
            return _serve(settings)
        return _migrate(settings)
    except ValidationError as exc:  # a setting from the environment: named, not echoed
        _refuse(f"cascade-proxy {args.command}: {settings_error(exc)}")
        return 2
    except (
        ConfigError,
        SettingsError,
        DatabaseUnavailable,
        MigrationError,
        InsecureListen,
    ) as exc:
        # a mistake in the config file or the environment: say which, without a traceback
        _refuse(f"cascade-proxy {args.command}: {exc}")
        return 2
    except KeyboardInterrupt:  # Ctrl-C during migrate or a client command: asked for, no crash
        return INTERRUPTED


def _refuse(message: str) -> None:
    """Say why the command cannot run: a line on stderr, or with ``CASCADE_LOG_FORMAT=json``
    one JSON log line like every other the process writes (read from the environment, since
    the settings themselves may be what is wrong)."""
    if format_from_env() == "json":
        configure_logging("info", "json")
        logging.getLogger("cascade").error("%s", message)
    else:
        print(message, file=sys.stderr)
