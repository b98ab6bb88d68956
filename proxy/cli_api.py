"""The HTTP client the ``cascade-proxy sessions`` and ``memory`` commands share: one call to a
running proxy's API with the bearer token an agent would use, its answer printed as JSON
(``--json``) or as the text a command renders, and every way of failing (no proxy, not a
URL, a key no header carries, an answer that is not Cascade's) as one line on stderr.
Stored text reaches the terminal only through ``printable``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

import httpx

from proxy.cli_text import cell, printable
from proxy.cli_url import check_port, has_credentials, on_loopback
from proxy.logs import configure_logging, format_from_env, masked, without_credentials

__all__ = [
    "CONNECT_SECONDS",
    "EXIT_BUSY",
    "EXIT_NOT_FOUND",
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "call_api",
    "say",
]


_KEY_SOURCES = "--api-key, CASCADE_API_KEY or OPENAI_API_KEY"

EXIT_UNREACHABLE = 3
"""No proxy answered: none listens, it did not answer in time, it cut its answer, or what
answered is not Cascade's API. Apart from argparse's 2, a usage error, which a retry never
mends."""
EXIT_NOT_FOUND = 4
"""The proxy answered that the session, fact or suggestion does not exist (404 ``not_found``),
for this key: a script removing one may take it as already gone."""
EXIT_REFUSED = 5
"""The proxy refused the key: none, one it does not know (401), or one limited to other
agents (403)."""
EXIT_BUSY = 6
"""The proxy answered that it cannot do it now, and nothing was done: busy (503
``server_busy``, a 429), its database away (503 ``database_unavailable``), or the session
held by another request (409 ``session_busy``). A script retries it, after the
``Retry-After`` the line names; unlike 3, a proxy of Cascade's is there and said so."""

# The error codes of a 409 that a later try may get past: the session was held, not wrong.
_BUSY_CODES = frozenset({"session_busy"})

WAIT_SECONDS = 600.0
"""How long a command waits for the proxy's whole answer, however slowly it comes
(``_within``): ``compact`` waits for a summary call."""

CONNECT_SECONDS = 30.0
"""How long a command waits for the connection itself, within ``WAIT_SECONDS``: a host that
drops the connection's first packet (a firewall, a full backlog) never had the request, and
is said to be unreachable, not to be working on it."""

# What a bearer token in a header may hold: visible ASCII, no space.
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")


def say(line: str, *, note: bool = False) -> None:
    """One line on stderr: an error (or, ``note``, a note beside the answer, such as where
    the next page starts), or with ``CASCADE_LOG_FORMAT=json`` one JSON log line (ERROR, a
    note INFO), as every line the process writes: a log pipeline reading each line as JSON
    takes the command's too. Read from the environment, since the settings themselves may
    be what is wrong. Either way ``masked`` as a log line is (a key pasted as ``--url`` is
    quoted by "not a URL"), the text line as the JSON one."""
    if format_from_env() != "json":
        print(masked(line), file=sys.stderr)
        return
    configure_logging("info", "json")
    logging.getLogger("cascade").log(logging.INFO if note else logging.ERROR, "%s", line)


def call_api(
    args: argparse.Namespace,
    url: str,
    key: str | None,
    request: tuple[str, str, dict[str, Any], Any],
    render: Callable[[dict[str, Any]], str],
    *,
    command: str,
    note: Callable[[dict[str, Any]], str | None] | None = None,
    key_from: str = "",
) -> int:
    """Send ``request`` (method, path, params, JSON body) and print the answer: the JSON with
    ``--json``, else ``render``'s text, then (either way) ``note``'s on stderr, or the error;
    0 on success, an error answer's status (``_status``), 2 for what cannot be sent (a key
    no header carries, not a URL: usage), ``EXIT_UNREACHABLE`` when no proxy answers. A
    refused key is named by ``key_from``, where it came from, never quoted."""
    params = request[2]  # an error naming a query parameter is said as its option
    if key and not _HEADER_SAFE.fullmatch(key):  # httpx's error would quote it, or a traceback
        say(
            f"cascade-proxy {command} {args.action}: the API key ({key_from or _KEY_SOURCES}) "
            "has a space, a line break or a non-ASCII character, which "
            "no header carries"
        )
        return 2
    headers = {"authorization": f"Bearer {key}"} if key else {}
    who = f"cascade-proxy {command} {args.action}"
    resp = _send(who, url, headers, request)
    if isinstance(resp, int):  # not sent, or no answer: said
        return resp
    try:
        answer = resp.json()
    except ValueError:  # not a Cascade proxy at --url, or a proxy in front of it failed
        return _not_cascade(who, url, resp, "no JSON")
    shown = ""
    try:  # rendered with --json too: another service's JSON is not printed as the API's
        shown = render(answer) if resp.is_success else ""
    except (AttributeError, KeyError, TypeError):  # JSON of another shape: not Cascade's API
        return _not_cascade(who, url, resp, "JSON Cascade's API does not give")
    if not resp.is_success and not _is_api_error(answer):
        return _not_cascade(who, url, resp, "JSON Cascade's API does not give")
    if args.json:
        print(json.dumps(answer, indent=2))
    elif not resp.is_success:
        _say_error(who, resp, answer, params, key_from, url, key)
    else:
        print(printable(shown))
    # on stderr once the answer is out, with --json too (stdout stays the API's JSON alone):
    # a reader that left sees none
    more = note(answer) if note and resp.is_success and isinstance(answer, dict) else None
    if more:
        sys.stdout.flush()
        say(more, note=True)
    return _status(resp, answer)


def _is_api_error(answer: Any) -> bool:
    """Whether ``answer`` is an error answer as the API gives one (an ``error`` object, or a
    gateway's string there), not another service's error JSON (a ``detail``, a
    ``message``, a list), which is no Cascade proxy's."""
    return isinstance(answer, dict) and isinstance(answer.get("error"), dict | str)


def _send(
    who: str, url: str, headers: dict[str, str], request: tuple[str, str, dict[str, Any], Any]
) -> httpx.Response | int:
    """The proxy's answer to ``request``, or the exit status once the line saying why there
    is none is written: 2 for what a retry never mends, ``EXIT_UNREACHABLE`` otherwise."""
    method, path, params, body = request
    shown_url = without_credentials(url)
    try:
        check_port(url)
        resp = _within(
            WAIT_SECONDS,
            lambda: httpx.request(
                method,
                url + path,
                headers=headers,
                params=params,
                json=body,
                timeout=httpx.Timeout(WAIT_SECONDS, connect=min(CONNECT_SECONDS, WAIT_SECONDS)),
                trust_env=not on_loopback(url),
            ),
        )
    # InvalidURL is raised apart from TransportError ("http://[::1"); UnsupportedProtocol is
    # one, but means no http:// or https:// (the "host:port" of the banner's address), not
    # a proxy that does not answer; a UnicodeError is the resolver's for a host name with an
    # empty label or one over 63 characters, which no DNS query carries (httpx passes it on)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, UnicodeError) as exc:
        # httpx's reason quotes a piece of the URL, which may be a password's first part
        why = f" ({exc})" if shown_url == url else ""
        say(
            f"{who}: cannot reach the proxy at {shown_url}: not a URL{why}; give one as "
            "http://host:port with --url or CASCADE_URL"
        )
        return 2
    except httpx.ReadTimeout:  # it was reached: saying it was not would mislead a retry
        say(
            f"{who}: no answer from the proxy at {shown_url} within {WAIT_SECONDS:g} s: "
            "it had the request, which may still complete there"
        )
        return EXIT_UNREACHABLE
    except (httpx.ReadError, httpx.RemoteProtocolError) as exc:  # reached, then cut: as above
        say(
            f"{who}: the proxy at {shown_url} broke off its answer ({_reason(exc)}): "
            "it had the request, which may have completed there"
        )
        return EXIT_UNREACHABLE
    except httpx.TransportError as exc:
        timed_out = isinstance(exc, httpx.ConnectTimeout)  # httpx's words: "timed out"
        said = f"no connection within {CONNECT_SECONDS:g} s" if timed_out else str(exc)
        say(f"{who}: cannot reach the proxy at {shown_url}: {said}")
        return EXIT_UNREACHABLE
    except httpx.DecodingError as exc:  # a content-encoding that lies: not Cascade's answer
        say(f"{who}: {shown_url} answered a body that does not decode: {exc}")
        return EXIT_UNREACHABLE
    except OSError as exc:  # httpx's TLS context, before any connection: a setting to mend
        say(f"{who}: {_ca_files_refused(exc)}")
        return 2
    return resp


def _status(resp: httpx.Response, answer: Any) -> int:
    """The exit status of an answer: 0 for a success, ``EXIT_NOT_FOUND`` for the API's 404
    ``not_found`` (a 404 of a path no route takes is a wrong URL, not an absent session),
    ``EXIT_REFUSED`` for a 401 or 403, ``EXIT_BUSY`` for a 503, a 429 or a 409
    ``session_busy``, 1 for any other error."""
    if resp.is_success:
        return 0
    if resp.status_code in (401, 403):
        return EXIT_REFUSED
    error = answer.get("error") if isinstance(answer, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if resp.status_code == 404 and code == "not_found":
        return EXIT_NOT_FOUND
    if resp.status_code in (429, 503) or (resp.status_code == 409 and code in _BUSY_CODES):
        return EXIT_BUSY
    return 1


def _say_error(
    who: str,
    resp: httpx.Response,
    answer: Any,
    params: dict[str, Any],
    key_from: str,
    url: str,
    key: str | None,
) -> None:
    """The API's error answer as one line on stderr: its status and message, and for a 401
    what was sent (a key and where it came from, the URL's Basic auth, or nothing), and for
    an answer to retry later (``EXIT_BUSY``) the ``Retry-After`` it gave."""
    error = answer.get("error") if isinstance(answer, dict) else None
    said = error.get("message") if isinstance(error, dict) else error  # a gateway's string
    if isinstance(error, dict) and isinstance(said, str):
        said = _as_option(said, error.get("param"), params)
    hint = ""
    if resp.status_code == 401:  # no key, or one the proxy does not know: say which
        sent = f"the key sent came from {key_from or _KEY_SOURCES}"
        hint = f" ({sent})" if key else " (give the key with --api-key or CASCADE_API_KEY)"
        if not key and has_credentials(url):  # what was sent: no key goes beside them
            hint = " (sent the URL's user and password as Basic auth)"
    wait = resp.headers.get("retry-after", "")
    # worth a retry, and when; isdigit alone takes "²" (latin-1's 0xb2), which int refuses
    if _status(resp, answer) == EXIT_BUSY and wait.isascii() and wait.isdigit():
        hint = f" (retry after {int(wait)} s)"
    say(f"{who}: {resp.status_code} {cell(said or resp.reason_phrase)}{hint}")


_OPTIONS = ("limit", "offset", "cursor")  # query parameters sent as the --option of the same name


def _as_option(message: str, param: Any, params: dict[str, Any]) -> str:
    """The API's 400 for a query parameter (``query.limit: …``) as the option the user gave
    (``--limit: …``): the API's bounds are its own, and the user typed no ``query.limit``."""
    prefix = f"query.{param}: "
    if param in _OPTIONS and param in params and message.startswith(prefix):
        return f"--{param}: " + message.removeprefix(prefix)
    return message


def _not_cascade(who: str, url: str, resp: httpx.Response, what: str) -> int:
    """Say that what answers at ``url`` is no Cascade proxy (another service, or a proxy in
    front of it that failed), quoting the start of its answer; exit status ``EXIT_UNREACHABLE``,
    as for no proxy."""
    said = cell(resp.text[:500]) if resp.text.strip() else "an empty body"  # one line
    say(
        f"{who}: {without_credentials(url)} answered {resp.status_code} with {what}: {said}"
        + _redirect(resp)
    )
    return EXIT_UNREACHABLE


def _redirect(resp: httpx.Response) -> str:
    """Where a redirect sends (a server in front sending http:// to https://), to give as
    ``--url`` instead: it is not followed, which would send the key on to another origin."""
    where = resp.headers.get("location", "")
    if not resp.is_redirect or not where:
        return ""
    with contextlib.suppress(httpx.InvalidURL):  # else quoted as sent
        where = str(resp.url.join(where))
    return f" (redirects to {cell(without_credentials(where))}; give that origin as --url)"


def _reason(exc: Exception) -> str:
    """httpx's words for a cut connection, or its type when it has none (a reset's ``ReadError``
    may carry an empty message)."""
    said = str(exc).strip()
    return cell(said) if said else type(exc).__name__


def _within(seconds: float, send: Callable[[], httpx.Response]) -> httpx.Response:
    """``send``'s answer, or httpx's ``ReadTimeout`` once ``seconds`` have passed since the
    call: httpx's timeout bounds each read, so an answer that comes a line at a time would
    hold the command for ever. ``send`` runs in a daemon thread, left behind at a timeout
    (the command exits); Ctrl-C interrupts the wait here, in the main thread."""
    done: list[httpx.Response | Exception] = []

    def run() -> None:
        try:
            done.append(send())
        except Exception as exc:  # raised again below, in the caller's thread
            done.append(exc)

    worker = threading.Thread(target=run, name="cascade-proxy-call", daemon=True)
    worker.start()
    worker.join(seconds)
    if not done:
        raise httpx.ReadTimeout(f"no answer within {seconds:g} s")
    if isinstance(done[0], Exception):
        raise done[0]
    return done[0]


def _ca_files_refused(exc: OSError) -> str:
    """Why the CA certificates httpx reads from ``SSL_CERT_FILE``/``SSL_CERT_DIR`` for a
    proxy beyond loopback did not load, naming the variables set (an ``OSError`` left to
    the command's writing of the answer was said as "cannot write the answer")."""
    named = [f"{v}={os.environ[v]}" for v in ("SSL_CERT_FILE", "SSL_CERT_DIR") if os.environ.get(v)]
    return f"cannot load the CA certificates ({', '.join(named) or 'the default ones'}): " + (
        cell(exc.strerror or str(exc))
    )
