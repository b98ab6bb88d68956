"""``cascade-proxy``: serve, migrate, config check, and a small session client. No logic here.

Every flag's help names the environment variable it overrides and its default; settings
not given as flags are read from the environment (``proxy.settings``). ``sessions …`` talks
to a running proxy over HTTP (``proxy.cli_sessions``), and so does ``memory …``
(``proxy.cli_memory``), both through ``proxy.cli_api``; ``proxy.cli_run`` runs each command.

This is the console script's module, so it imports the standard library alone (and its
arguments' types, ``proxy.cli_args``, and its usage errors' wording, ``proxy.cli_usage``,
which do too): the rest (pydantic, the app, httpx, asyncpg) takes a moment to load, and is
imported inside the guard that makes Ctrl-C, at any point of the start too, exit 130
without a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from proxy import DEFAULT_CONFIG, __version__, cli_args as arg, cli_usage as usage

__all__ = ["main", "option_names"]

INTERRUPTED = 128 + signal.SIGINT
"""The exit status of a command ended by Ctrl-C, as a shell reports one."""


def main(argv: Sequence[str] | None = None) -> int:
    if sys.stderr is None:  # `2>&-`: print(file=None) would write each error line on stdout
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the process)
    _Parser.given = tuple(sys.argv[1:] if argv is None else argv)
    _Parser.hint, _Parser.unplaced = "", ()  # an earlier call's, in one process (tests)
    try:
        parser = _parser()
        _Parser.names, _Parser.options = usage.names(parser), usage.options(parser)
        args, extra = parser.parse_known_args(argv)
        if extra:  # said by the command's parser, with its usage, not by the top one's
            command = usage.command_parser(parser, args)
            _Parser.unplaced = usage.unmarked(extra, _Parser.names, command._option_string_actions)
            _Parser.hint = usage.misplaced(
                command, argv, args, _Parser.names, _Parser.unplaced, _Parser.options
            )
            command.error(f"unrecognized arguments: {' '.join(extra)}")
        from proxy.cli_run import run  # the heavy imports, under this guard

        return run(args)
    except KeyboardInterrupt:  # Ctrl-C, while starting or running: asked for, no crash
        return INTERRUPTED


def option_names(args: argparse.Namespace) -> dict[str, str]:
    """Each name of ``args`` as the command line gives it, for a line that names one: an
    option by its flag (``api_key`` as ``--api-key``), a positional as its usage shows it
    (``id`` as ``ID``)."""
    actions = usage.command_parser(_parser(), args)._actions
    return {
        a.dest: max(a.option_strings, key=len) if a.option_strings else a.metavar or a.dest.upper()
        for a in actions
    }


_DATABASE_URL = (
    "PostgreSQL URL (env DATABASE_URL; default: an embedded PostgreSQL in "
    "$CASCADE_DATA_DIR, else $XDG_DATA_HOME/cascade, else ~/.local/share/cascade)"
)


# The statuses of sessions and memory (proxy.cli_api's EXIT_*, README's table), for a
# script's author reading --help; the numbers here keep the console script's import light.
_EXIT_STATUSES = (
    "exit status: 0 done, 1 another error answer, 2 usage, 3 no proxy answered, 4 not found, "
    "5 the key refused, 6 busy, retry later (after the Retry-After the line names), "
    "130 Ctrl-C, 141 the reader closed the pipe"
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), but with ``CASCADE_LOG_FORMAT=json`` a usage
    error is one JSON log line, as every other line the process writes, not argparse's
    usage over several lines, which a log pipeline parsing each line as JSON would refuse.
    Either way the message quotes no secret the command line gave (``proxy.cli_usage``)."""

    given: tuple[str, ...] = ()
    """The command line ``main`` reads, whose secrets an error masks."""
    names: frozenset[str] = frozenset()
    """Each command's and action's name, which no secret option's value is taken as."""
    options: dict[str, bool] = {}
    """Each option of the commands, and whether it takes a value (``--json`` does not)."""
    unplaced: tuple[str, ...] = ()
    """The arguments no parser took that nothing marks as what they are, masked too."""
    hint: str = ""
    """Where a misplaced option goes: a command line built with its secrets masked, added
    after the message's masking, which would take a word of it for a key equal to it."""

    def error(self, message: str) -> NoReturn:
        hint = self.hint
        unplaced = self.unplaced + usage.unnamed_choice(
            message, self.given, self.names, self.options
        )
        if message.startswith("argument COMMAND: invalid choice"):  # none refused in turn
            hint = "" if unplaced else usage.valued_before(self, self.given)
        message = usage.unquoted_secrets(message, self.given, self.names, unplaced, self.options)
        if hint:
            from proxy.logs import masked  # an error's path alone: loads light

            message += masked(hint)
        if os.environ.get("CASCADE_LOG_FORMAT", "").strip().lower() != "json":
            super().error(message)
        from proxy.cli_run import refuse  # only now: the console script loads light

        refuse(f"{self.prog}: {message}")
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="cascade-proxy",
        description="Cascade: an OpenAI-compatible proxy that manages an agent's context "
        "window. Settings not given as flags come from the environment; each "
        "flag's help names its variable and default.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="run the proxy",
        description="Run the proxy.",
        epilog="exit status: 0 stopped, 2 a setting to mend (as migrate's, the database's "
        "too), 3 a port held or a database that did not answer (worth a retry), 130 Ctrl-C, "
        "143 SIGTERM",
    )
    serve.add_argument(
        "--host",
        type=arg.host,
        help="address to listen on (env CASCADE_HOST; default "
        "127.0.0.1); a non-loopback one needs proxy keys (auth.keys) or "
        "--allow-unauthenticated",
    )
    serve.add_argument(
        "--port", type=arg.port, help="TCP port to listen on (env CASCADE_PORT; default 8080)"
    )
    serve.add_argument(
        "--config",
        type=str,  # "" as the variable's empty value: the default (Settings._blank_path)
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
    config = sub.add_parser(
        "config",
        help="check a config file without starting the proxy",
        description="Check a config file without starting the proxy.",
    )
    check = config.add_subparsers(dest="action", required=True, metavar="ACTION").add_parser(
        "check",
        help="validate it as a start or a reload does, and print what the proxy would warn of",
        description="Validate the config file as a start or a reload does (exit 2 and the "
        "reason when it is refused), and print what the proxy would warn of.",
    )
    check.add_argument(
        "--config",
        type=str,
        help=f"agents.json to check (env CASCADE_CONFIG; default {DEFAULT_CONFIG} when it "
        "exists, else built-in defaults)",
    )
    migrate = sub.add_parser(
        "migrate",
        help="apply database migrations and exit",
        description="Apply pending database migrations and exit.",
        epilog="exit status: 0 applied (or none pending), 2 a setting to mend (the URL or a "
        "certificate it names, TLS the server refuses, the role, its password, the database "
        "name, a role that may not migrate, CASCADE_DATA_DIR, CASCADE_DB_POOLER, no embedded "
        "server installed), 3 a database that did not answer (worth a retry), 130 Ctrl-C",
    )
    migrate.add_argument("--database-url", help=_DATABASE_URL)
    sess = sub.add_parser(
        "sessions",
        help="inspect and manage the sessions of a running proxy",
        description="Inspect and manage the sessions of a running proxy, as the tenant of "
        "the API key given.",
        epilog=_EXIT_STATUSES,
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
        a = ssub.add_parser(
            action, help=text, description=text[0].upper() + text[1:] + ".", epilog=_EXIT_STATUSES
        )
        _client_options(a)
        if action != "ls":
            a.add_argument("id", metavar="ID", type=arg.path_session_id, help="the session id")
        if action in ("ls", "messages"):
            most = arg.LIST_MAX if action == "ls" else arg.MESSAGES_MAX
            _page_options(a, 100 if action == "ls" else 1000, most, cursor=action == "ls")
        if action == "ls":
            a.add_argument(
                "--filter",
                metavar="TEXT",
                help="only sessions whose id, agent or model holds TEXT, case aside (default: all)",
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
                "--new-id",
                type=arg.session_id,
                help="the new session's id (default: ID-branch-<hex>)",
            )
    _memory_parser(sub)
    return p


def _page_options(
    p: argparse.ArgumentParser, limit: int, most: int, *, cursor: bool = False
) -> None:
    """``--limit`` (default ``limit``, at most ``most``, the API's largest page: above it
    a usage error, as an ``--offset`` past a bigint is, not the API's 400 naming its
    ``query.limit``) and ``--offset``, as the API's lists take them; with
    ``cursor``, ``--cursor`` (a page's ``next_cursor``) too, a usage error beside
    ``--offset`` as the API's 400. That ``--offset`` defaults to None (read as 0): argparse
    takes an option as given when its value is not the default object, and 0 is always 0."""
    p.add_argument(
        "--limit",
        type=arg.count(1, most),
        default=limit,
        help=f"how many to list, at most {most} (default %(default)s)",
    )
    start = p.add_mutually_exclusive_group() if cursor else p
    start.add_argument(
        "--offset",
        type=arg.count(0, arg.BIGINT_MAX),
        default=None if cursor else 0,
        help="how many to skip first (default 0)",
    )
    if cursor:
        start.add_argument(
            "--cursor",
            default="",
            help="start after the place a page's note (or its next_cursor) names, which rows "
            "made or gone meanwhile do not move; a place in the list's order, not in its "
            "filter: give that page's other options again; not with --offset (default: the "
            "first page)",
        )


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
        "OPENAI_API_KEY; default none); prefer the variable: a command line is shown to "
        "every user by ps",
    )
    p.add_argument(
        "--json",
        action="store_true",
        default=default,
        help="print the API's JSON instead of a table (default: a table)",
    )


_MEMORY_HELPS = {
    "ls": "list the facts of a scope",
    "add": "remember a fact (it is checked: no secrets, instructions or duplicates)",
    "rm": "forget a fact, by its id",
    "suggestions": "list the facts memory promotion suggests, waiting for an answer",
    "accept": "store a suggestion's facts (all, or those given with --fact)",
    "reject": "dismiss a suggestion",
}


def _memory_parser(sub: Any) -> None:
    """The ``memory`` command and its actions (``proxy.cli_memory`` runs them)."""
    mem = sub.add_parser(
        "memory",
        help="list, add and remove the long-term facts of a running proxy, and answer the "
        "facts it suggests",
        description="List, add and remove the long-term facts injected into prompts as "
        "<memory>, and accept or reject the facts memory promotion suggests, as the tenant "
        "of the API key given.",
        epilog=_EXIT_STATUSES,
    )
    _client_options(mem)
    msub = mem.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in _MEMORY_HELPS.items():
        a = msub.add_parser(
            action, help=text, description=text[0].upper() + text[1:] + ".", epilog=_EXIT_STATUSES
        )
        _client_options(a)
        if action in ("ls", "add"):
            a.add_argument(
                "--scope", default="global", help="'global' or 'agent:<name>' (default %(default)s)"
            )
        if action == "ls":
            _page_options(a, 100, arg.LIST_MAX, cursor=True)
        if action == "add":
            a.add_argument("text", metavar="TEXT", help="the fact, one sentence")
        if action == "rm":
            a.add_argument(
                "id",
                metavar="ID",
                type=arg.count(1, arg.BIGINT_MAX),
                help="the fact's id (see 'memory ls')",
            )
        if action == "suggestions":
            a.add_argument(
                "--session",
                default="",
                help="only this session's suggestions (default: every session's)",
            )
            _page_options(a, 100, arg.LIST_MAX, cursor=True)
        if action in ("accept", "reject"):
            a.add_argument(
                "id",
                metavar="ID",
                type=arg.suggestion_id,
                help="the suggestion's id (see 'memory suggestions')",
            )
        if action == "accept":
            a.add_argument(
                "--fact",
                action="append",
                dest="facts",
                metavar="TEXT",
                help="keep only this fact of the suggestion (repeatable; default: all)",
            )
