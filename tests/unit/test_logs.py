"""proxy/logs.py: one handler, text or JSON lines, request fields, uvicorn's loggers included."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from proxy import requestlog
from proxy.logs import causes, configure_logging

_LOGGERS = ("cascade", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx")


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved_root = root.handlers[:]
    saved = {
        n: (lg.handlers[:], lg.level, lg.propagate, lg.disabled)
        for n in _LOGGERS
        for lg in [logging.getLogger(n)]
    }
    yield
    root.handlers[:] = saved_root
    for name, (handlers, level, propagate, disabled) in saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:], lg.level, lg.propagate, lg.disabled = handlers, level, propagate, disabled
    logging.captureWarnings(False)


def _ours() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if getattr(h, "cascade", False)]


def test_text_lines_at_the_configured_level_once_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = logging.NullHandler()  # a test's log capture, say: it must stay
    logging.getLogger().addHandler(other)
    configure_logging("warning", "text")
    configure_logging("warning", "text")  # a second app in one process: still one line each
    assert len(_ours()) == 1 and other in logging.getLogger().handlers
    logging.getLogger("cascade.config").info("config reloaded")
    logging.getLogger("cascade.config").warning("config rejected")
    logging.getLogger("uvicorn.error").warning("uvicorn says")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith(" WARNING cascade.config: config rejected")
    assert lines[1].endswith(" WARNING uvicorn.error: uvicorn says")


def test_uvicorn_access_log_is_off_so_our_access_line_is_not_doubled() -> None:
    logging.getLogger("uvicorn.access").addHandler(logging.StreamHandler())  # uvicorn's config
    configure_logging("info", "text")
    access = logging.getLogger("uvicorn.access")
    assert not access.hasHandlers()  # uvicorn then skips building its access line at all
    assert not logging.getLogger("uvicorn").handlers  # its lines go through ours


def test_json_lines_carry_the_request_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    token = requestlog.begin(requestlog.RequestRecord("req-1", session_id="s-1"))
    try:
        logging.getLogger("cascade").info("two\nlines")
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("cascade").exception("failed")
    finally:
        requestlog.end(token)
    logging.getLogger("uvicorn.error").info("outside a request")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    first, second, third = (json.loads(line) for line in lines)
    assert first["message"] == "two\nlines" and first["level"] == "INFO"
    assert first["logger"] == "cascade" and first["ts"].endswith("Z")
    assert first["request_id"] == "req-1" and first["session_id"] == "s-1"
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exc"]
    assert third["logger"] == "uvicorn.error" and "request_id" not in third


def test_text_escapes_line_breaks_in_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "text")
    logging.getLogger("cascade").info("GET /a\nINFO forged")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("cascade: GET /a\\nINFO forged")


def test_causes_follow_the_chain_and_cut_credentials_out_of_urls() -> None:
    try:
        try:
            try:
                raise OSError("proxy http://user:hunter2@egress:3128 refused")
            except OSError as inner:
                raise ConnectionError("connect failed") from inner
        except ConnectionError as middle:
            raise RuntimeError("502") from middle
    except RuntimeError as exc:
        text = causes(exc)
    assert text == (
        " (cause: ConnectionError: connect failed <- OSError: proxy http://egress:3128 refused)"
    )
    assert causes(ValueError("alone")) == ""


class _Wrapped(Exception):
    """As aiohttp's TransferEncodingError prints: not the words its wrapper quotes."""

    def __str__(self) -> str:
        return "400, message:\n  Not enough data to satisfy transfer length header."

    def __repr__(self) -> str:
        return "<_Wrapped: 400, message='Not enough data to satisfy transfer length header.'>"


def test_a_cause_its_wrapper_quotes_is_named_once() -> None:
    """httpx-aiohttp's ReadError quotes aiohttp's ClientPayloadError, which quotes the
    TransferEncodingError's repr: the line said the same words three times."""
    inner = _Wrapped()
    said = f"Response payload is not completed: {inner!r}"
    try:
        try:
            try:
                raise inner
            except _Wrapped as e:
                raise ConnectionError(said) from e
        except ConnectionError as e:
            raise OSError(said) from e
    except OSError as e:
        try:
            raise RuntimeError("502") from e
        except RuntimeError as exc:
            text = causes(exc)
    assert text == f" (cause: OSError: {said} <- ConnectionError <- _Wrapped)", text
    assert text.count("Not enough data") == 1


_LEAKS = {
    "Bearer sk-proj-logleak0123456789abcdef": "sk-proj-logleak0123456789abcdef",
    "Authorization: Basic dXNlcjpsb2dsZWFrcGFzcw==": "dXNlcjpsb2dsZWFrcGFzcw==",
    "https://gw.test/v1/chat?api-version=1&key=gwlogleak42": "gwlogleak42",
    "https://gw.test/v1/embed?sig=sAsLoGlEaK%2Bx&code=azfnlogleak": "sAsLoGlEaK%2Bx azfnlogleak",
    '{"error": {"message": "bad x-api-key: ak-logleak-77"}}': "ak-logleak-77",
    "postgresql://app:pglogleak@db:5432/app": "pglogleak",
}


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_credential_reaches_a_log_line(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A provider's error body, an httpx error naming the URL it called (a gateway's key in
    its query string), a header a gateway echoes: whatever a line quotes, in its message, its
    fields or its traceback, is written without the credential in it; the words around it
    (``api-version=1``) stay."""
    configure_logging("info", fmt)  # type: ignore[arg-type]
    log = logging.getLogger("cascade")
    for text in _LEAKS:
        log.warning("provider answered 401: %s", text, extra={"fields": {"body": text}})
        try:
            raise RuntimeError(text)
        except RuntimeError:
            log.exception("call failed")
    err = capsys.readouterr().err
    leaked = [s for secrets in _LEAKS.values() for s in secrets.split() if s in err]
    assert leaked == [] and "api-version=1" in err and "[REDACTED]" in err


class _Url:
    """An object a line's field holds, written by its ``str`` (an ``httpx.URL``)."""

    def __str__(self) -> str:
        return "https://gw.test/v1?key=objlogleak7"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_credential_reaches_a_log_line_in_a_structured_field(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A field that is a dict, a list or another object is masked as a string field is: a
    header map (``x-api-key`` names its value's secret, a sibling of it), a list of URLs,
    an object written by its ``str``. In JSON lines a dict or list stays one, and a number
    stays a number."""
    configure_logging("info", fmt)  # type: ignore[arg-type]
    fields = {
        "headers": {"x-api-key": "ak-logleak-88", "Authorization": "Bearer dictlogleak0123"},
        "urls": ["https://gw.test/v1?api_key=listlogleak5", {"dsn": "postgres://a:nestleak@h/d"}],
        "url": _Url(),
        "status": 401,
    }
    logging.getLogger("cascade").warning("upstream refused", extra={"fields": fields})
    err = capsys.readouterr().err
    leaks = ("ak-logleak-88", "dictlogleak0123", "listlogleak5", "nestleak", "objlogleak7")
    assert [s for s in leaks if s in err] == [] and "[REDACTED]" in err
    if fmt == "json":
        line = json.loads(err)
        assert line["headers"]["x-api-key"] == "[REDACTED]" and line["status"] == 401
        assert isinstance(line["urls"], list) and line["urls"][1]["dsn"].endswith("***@h/d")


def test_a_field_json_cannot_write_is_written_as_its_masked_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A dict JSON cannot write (a tuple for a key) is its masked ``str``: the line failed,
    and logging's own error report printed the record's arguments, secrets and all."""
    configure_logging("info", "json")
    fields = {"seen": {("gw", 1): "Bearer tuplelogleak0123"}}
    logging.getLogger("cascade").warning("call %s", "x", extra={"fields": fields})
    err = capsys.readouterr().err
    assert "tuplelogleak0123" not in err and json.loads(err)["seen"].endswith("[REDACTED]'}")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_line_that_cannot_be_formatted_reports_no_argument(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A call whose arguments do not fit its format (a bug) is reported on one masked line:
    logging's own report printed the arguments whole, a provider's error body with them."""
    configure_logging("info", fmt)  # type: ignore[arg-type]
    record = logging.LogRecord(
        "cascade", logging.WARNING, __file__, 1, "status %d", ("Bearer badfmtlogleak0123",), None
    )
    _ours()[0].handle(record)  # not through pytest's own handler, which raises instead
    err = capsys.readouterr().err
    assert "badfmtlogleak0123" not in err and "status %d" in err and len(err.splitlines()) == 1
