"""The types of the command line's arguments: each turns the text given into the value a
command takes, or says why it is none as that option's usage error (exit 2), before any
request. ``proxy.cli`` imports this module before its Ctrl-C guard runs, so it stays on the
standard library as that module does.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

__all__ = [
    "BIGINT_MAX",
    "LIST_MAX",
    "MESSAGES_MAX",
    "QUOTED_DIGITS",
    "count",
    "host",
    "path_session_id",
    "port",
    "quoted",
    "session_id",
    "suggestion_id",
]


def port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:  # argparse would say "invalid port value"
        port = 0
    if not 1 <= port <= 65535:  # uvicorn would take 99999 and listen somewhere else
        # a long number as a count's is (quoted: it may be a key); a word stays, a typo
        shown = quoted(text.strip()) if re.fullmatch(r"\s*[+-]?\d+\s*", text) else text
        raise argparse.ArgumentTypeError(f"{shown} is not a TCP port (1-65535)")
    return port


BIGINT_MAX = 2**63 - 1
"""The largest offset or fact id the API takes (a Postgres bigint; ``proxy.api.deps``)."""

LIST_MAX = 1000
"""The largest page of sessions, facts or suggestions the API gives (its ``limit``'s ``le``)."""

MESSAGES_MAX = 10000
"""The largest page of a session's messages the API gives."""


QUOTED_DIGITS = 6
"""The most digits of a number an error quotes (a count, an id, a port, as one types them): a
longer run of digits may be a key (a key may be all digits), which is named by its length."""


def quoted(text: str) -> str:
    """``text`` as an error quotes it: a number of :data:`QUOTED_DIGITS` digits at most; a
    longer number by its length, and anything else not at all: a
    key given in the wrong place (``memory rm K``) would be written into a terminal or a
    CI log."""
    if re.fullmatch(rf"[+-]?\d{{1,{QUOTED_DIGITS}}}", text):
        return text
    if re.fullmatch(r"[+-]?\d+", text):
        return f"a number of {len(text.lstrip('+-'))} digits"
    return ""


def count(least: int, most: int | None = None) -> Callable[[str], int]:
    """An integer option of ``least`` or more (and ``most`` or less): one the API can never
    take is the option's usage error, not a request whose 400 names the API's
    ``query.limit`` or ``path.fact_id``."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # argparse would say "invalid count value"
            value = None
        shown = quoted(text.strip()) if text.strip() else repr(text)  # "--offset ''"
        if value is None or not shown:
            raise argparse.ArgumentTypeError(
                f"not a whole number, which a count of {least} or more is"
                + ("" if shown else " (what was given is not quoted: it may be a key)")
            )
        if value < least:
            raise argparse.ArgumentTypeError(f"{shown} is not a count of {least} or more")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"{shown} is above {most}, the largest the API takes")
        return value

    return count


def host(text: str) -> str:
    """An address as given, an IPv6 one without its URL brackets; an empty one would bind
    every interface (``CASCADE_HOST`` is refused alike, ``proxy.settings``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty address: give one, 127.0.0.1 by default")
    from proxy.settings import unbracketed  # serve's option alone: the other commands skip it

    return unbracketed(text)


def session_id(text: str) -> str:
    """A session id as given; the proxy checks the rest. An empty one would name no session
    in the URL (``GET /v1/sessions/``) or, for ``--new-id``, be dropped for a generated id."""
    if not text:
        raise argparse.ArgumentTypeError("an empty session id")
    return text


def suggestion_id(text: str) -> str:
    """A suggestion id for the URL's path, checked as :func:`path_session_id` checks a
    session's: an empty one or one with a ``/`` makes a path no route takes."""
    if not text:
        raise argparse.ArgumentTypeError("an empty suggestion id")
    if "/" in text:
        raise argparse.ArgumentTypeError("a suggestion id holds no '/'")
    return text


def path_session_id(text: str) -> str:
    """A session id for the URL's path: no ``/`` either, which, encoded or not, makes a
    path no session route takes (the proxy's 404 ``unknown_url``, worded for a wrong URL)."""
    if "/" in session_id(text):
        raise argparse.ArgumentTypeError("a session id holds no '/'")
    return text
