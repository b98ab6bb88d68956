"""Where the process's log lines go and what they look like: ``configure_logging``.

Every logger, uvicorn's included, writes through one handler on the root logger to stderr,
as readable text (``CASCADE_LOG_FORMAT=text``, the default) or one JSON object per line
(``json``: ``ts``, ``level``, ``logger``, ``message``, and the request's fields). A line
written while a request is served carries that request's ``request_id`` and ``session_id``
(``proxy.requestlog``). Each line is ``masked`` first: no credential it quotes (a provider's
error body, a URL's key, an ``Authorization`` header) is written. uvicorn's access log is
switched off: ``proxy.middleware.AccessLog`` writes one richer line per request instead.

``create_app`` calls ``configure_logging``, so ``cascade-proxy serve`` and
``uvicorn proxy.app:create_app --factory`` log the same way; it runs after uvicorn set up its
own handlers in the second case, and replaces them.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
import threading
import time
from types import TracebackType
from typing import Any, Literal

from proxy import requestlog
from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from proxy.cascade.secret_tokens import URL_PASSWORD
from proxy.credentials import CREDENTIAL_WORDS
from proxy.store.dsn import redact_dsn

__all__ = [
    "BIDI_CONTROLS",
    "configure_logging",
    "causes",
    "format_from_env",
    "masked",
    "without_credentials",
    "JsonFormatter",
    "TextFormatter",
    "LogFormat",
]

LogFormat = Literal["text", "json"]

_UVICORN = ("uvicorn", "uvicorn.error")
_QUIET = ("httpx", "httpcore")  # one INFO line per provider call, URL included: ours says more


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """The line's own fields (``extra={"fields": {...}}``), then the current request's ids."""
    fields: dict[str, Any] = dict(getattr(record, "fields", None) or {})
    if (current := requestlog.current()) is not None:
        fields.setdefault("request_id", current.request_id)
        if current.session_id is not None:
            fields.setdefault("session_id", current.session_id)
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per record; a traceback goes in ``exc``, never on lines of its own."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": masked(record.getMessage()),
        }
        line.update({k: _masked_field(v) for k, v in _fields(record).items()})
        if record.exc_info:
            line["exc"] = masked(self.formatException(record.exc_info))
        if record.stack_info:
            line["stack"] = masked(self.formatStack(record.stack_info))
        return json.dumps(line, default=str)


BIDI_CONTROLS = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
"""The bidirectional controls: each reorders what follows it on its line as a viewer shows
it (a right-to-left override shows "txt.exe" as "exe.txt")."""

# Control characters (C0 but the tab, DEL, C1), Unicode's line and paragraph separators and
# the bidirectional controls, each as an escape: a line break is not the only way to end a
# line (NEL, U+2028 to a viewer that splits as str.splitlines does), ESC sequences drive the
# terminal a log is tailed in, and a bidirectional control rewrites how the line reads.
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}
_ESCAPES |= {0x0A: "\\n", 0x0D: "\\r", 0x2028: "\\u2028", 0x2029: "\\u2029"}
_ESCAPES |= {c: f"\\u{c:04x}" for c in BIDI_CONTROLS}


def _escaped(text: str) -> str:
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger>: <message> key=value…``, one line per record plus a traceback.

    Control characters in the message and the fields (line breaks, NEL, U+2028, ESC,
    bidirectional controls …) are escaped, so a value that reached a line (a request's path,
    a client's string quoted in an error) can neither forge a line of its own, send the
    terminal escape sequences, nor reorder how the line reads.
    """

    def format(self, record: logging.LogRecord) -> str:
        message = _escaped(masked(record.getMessage()))
        shown = getattr(record, "in_text", ())  # fields the message already says
        extra = " ".join(
            f"{k}={_escaped(str(v) if _scalar(v) else masked(str(v)))}"
            for k, v in _fields(record).items()
            if v is not None and k not in shown
        )
        text = f"{_timestamp(record)} {record.levelname} {record.name}: {message}"
        if extra:
            text = f"{text} {extra}"
        if record.exc_info:
            text = f"{text}\n{masked(self.formatException(record.exc_info))}"
        if record.stack_info:
            text = f"{text}\n{masked(self.formatStack(record.stack_info))}"
        return text


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a line is written (a test's capture swaps it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        return sys.stderr

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        """One masked line for a record that could not be written (its arguments do not fit
        its format): logging's own report prints the arguments whole, and a traceback."""
        exc = sys.exc_info()[1]
        reason = f"{type(exc).__name__}: {masked(str(exc))}" if exc else "unknown"
        text = masked(f"logging error in {record.name}: {record.msg!s} ({reason})")
        sys.stderr.write(_escaped(text) + "\n")


def configure_logging(level: str, fmt: LogFormat) -> None:
    """Route every logger to one stderr handler in ``fmt``; Cascade's and uvicorn's at ``level``.

    Idempotent: a second call replaces the handler the first installed, and handlers others
    put on the root logger (a test's log capture) stay.
    """
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.cascade = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if not getattr(h, "cascade", False)]
    root.addHandler(handler)
    logging.captureWarnings(True)  # warnings become log lines too, in the same format
    _route_uncaught(fmt)
    for name in ("cascade", *_UVICORN):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(level.upper())
    access = logging.getLogger("uvicorn.access")
    access.handlers.clear()
    access.propagate = False  # no handler anywhere: uvicorn skips building the line at all
    access.disabled = True
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("asyncpg.pool").addFilter(_floor_retries)  # once: the same function


def _floor_retries(record: logging.LogRecord) -> bool:
    """asyncpg's pool logs every failed try to restore its connection floor, at WARNING with
    a traceback, every second or two while PostgreSQL is down. The pool's connect in
    ``proxy.store.db`` says once that it is gone, with the cause, and once that it is back."""
    return not record.getMessage().startswith("Failed to restore the pool connection floor")


def format_from_env() -> LogFormat:
    """``CASCADE_LOG_FORMAT`` read directly, for a refusal written before the settings exist
    (they may be what is wrong)."""
    return "json" if os.environ.get("CASCADE_LOG_FORMAT", "").strip().lower() == "json" else "text"


def _route_uncaught(fmt: LogFormat) -> None:
    """With ``json``, an exception nothing caught (a config error raised out of
    ``create_app`` under ``uvicorn --factory``, a crash in a thread) is one JSON line with
    its traceback in ``exc``, not Python's multi-line print; ``text`` keeps Python's print."""
    ours = sys.excepthook is _uncaught
    if fmt == "json":
        sys.excepthook = _uncaught
        threading.excepthook = _uncaught_in_thread
    elif ours:
        sys.excepthook = sys.__excepthook__
        threading.excepthook = threading.__excepthook__


def _uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger("cascade").critical(
        "uncaught %s: %s", kind.__name__, value, exc_info=(kind, value, tb)
    )


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is not None and args.exc_type is not SystemExit:  # as Python's hook
        _uncaught(args.exc_type, args.exc_value, args.exc_traceback)


_USERINFO = re.compile(r"//[^/\s]*@")  # to the last "@": a password may hold an unencoded one


def without_credentials(text: str) -> str:
    """``text`` with each URL's ``user:password@`` cut out (an HTTP URL's user alone may be a
    token), and the password masked where that cannot be told apart (``redact_dsn``): one
    with a blank or an unencoded "/", or a URL written without its ``//``."""
    return redact_dsn(_USERINFO.sub("//", text))


# A URL's query parameter whose name says it holds a credential (``CREDENTIAL_WORDS``, or
# Azure Functions' ``code`` whole), as ``proxy.answers`` reads what a call sent: an httpx
# error names the URL it called, a gateway's key in its query included.
_QUERY_CREDENTIAL = re.compile(
    rf"([?&](?:[\w.%\-]{{0,64}}?(?:{CREDENTIAL_WORDS})[\w.%\-]{{0,64}}|code)=)"
    r"[^&\s#\"'<>\\]{1,4096}",
    re.IGNORECASE,
)


def masked(text: str) -> str:
    """``text`` as a log line shows it: a URL's password masked (``redact_dsn``, as a
    refusal already writes it: ``user:***@``), each credential query parameter's value, and
    whatever the other built-in secret patterns find (a ``Bearer`` token, an
    ``Authorization`` header, an API key, ``password=…``, a PEM key) as :data:`REDACTED`.
    Every line goes through it, its fields and traceback too: a provider's error body, an
    exception's message or a header a gateway echoes can hold any of them. Cascade's own
    lines are worded to hold no ``key: value`` a pattern reads as a secret (a refusal of a
    provider's ``apiKeyEnv`` is ``provider p: its apiKeyEnv is …``, ``config_checks.refusal``),
    so nothing is excepted here."""
    if "@" in text or "password" in text:  # what each of redact_dsn's patterns needs
        text = redact_dsn(text)
    if "=" in text:
        text = _QUERY_CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)
    return redact(text, _patterns())[0]


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float))


def _masked_field(value: Any) -> Any:
    """A line's field as a JSON line writes it, masked: a number, a boolean or None as it
    is (no credential is one); a dict or a list masked as its JSON text, so an entry's key
    reads as its value's (``{"x-api-key": …}``), and read back (left the masked text if that
    is no JSON); anything else, and a dict JSON cannot write, as its masked ``str``."""
    if _scalar(value):
        return value
    if isinstance(value, str):
        return masked(value)
    if not isinstance(value, (dict, list, tuple)):
        return masked(str(value))
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):  # a tuple for a key, a cycle
        return masked(str(value))
    out = masked(text)
    if out == text:
        return value
    try:
        return json.loads(out)
    except ValueError:
        return out


@functools.cache
def _patterns() -> tuple[re.Pattern[str], ...]:
    """The built-in patterns but a URL's password's, which ``redact_dsn`` masks as ``***``
    (the pattern would rewrite that ``***``)."""
    return tuple(p for p in compile_patterns(()) if p.pattern != URL_PASSWORD)


def causes(exc: BaseException, depth: int = 3) -> str:
    """`` (cause: Type: message <- Type: message)``, what a traceback would show as the causes
    of ``exc`` (``raise … from``, else the exception being handled), or ``""``, each
    ``without_credentials``. A cause whose words the line already holds (a wrapper quotes
    its cause's message, or its repr, ``<Type: …>``: aiohttp's and httpx's do) is named by
    its type alone, so the line says each cause once."""
    found: list[str] = []
    said = ""
    cause = _cause(exc)
    while cause is not None and len(found) < depth:
        name, words = type(cause).__name__, str(cause)
        quoted = f"<{name}:" in said or (bool(words.strip()) and words in said)
        found.append(name if quoted else without_credentials(f"{name}: {words}"))
        said += f" {words}"
        cause = _cause(cause)
    return f" (cause: {' <- '.join(found)})" if found else ""


def _cause(exc: BaseException) -> BaseException | None:
    return exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
