"""Regression: text log lines escaped ``\\r`` and ``\\n`` only, so a request with no key for
``/v1/x%1B%5B31m…%C2%85…%E2%80%A8…`` wrote ESC (a terminal escape sequence), NEL and
U+2028 raw into the 401's line: a viewer that splits lines as ``str.splitlines`` does saw a
forged line, and a terminal tailing the log ran the sequence."""

from __future__ import annotations

import logging

from proxy import requestlog
from proxy.logs import TextFormatter

_HOSTILE = "/v1/x\x1b[31mFAKE\x85INFO forged\u2028two\u2029three\x0bfour\x1cfive\x7f\x9b"


def _record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("cascade", logging.INFO, __file__, 1, message, args, None)
    record.__dict__.update(extra)
    return record


def _assert_one_clean_line(line: str) -> None:
    assert len(line.splitlines()) == 1
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in line)
    assert "\u2028" not in line and "\u2029" not in line


def test_control_characters_in_a_message_are_escaped() -> None:
    line = TextFormatter().format(_record("401 GET %s: missing key", _HOSTILE))
    _assert_one_clean_line(line)
    assert "/v1/x\\x1b[31mFAKE\\x85INFO forged\\u2028two\\u2029three\\x0bfour" in line


def test_control_characters_in_a_field_are_escaped() -> None:
    token = requestlog.begin(requestlog.RequestRecord("rid"))
    try:
        line = TextFormatter().format(
            _record("GET / 200", fields={"path": _HOSTILE, "model": "a\nb"})
        )
    finally:
        requestlog.end(token)
    _assert_one_clean_line(line)
    assert "model=a\\nb" in line and "request_id=rid" in line


def test_tabs_and_printable_unicode_are_kept() -> None:
    line = TextFormatter().format(_record("a\tb café €"))
    assert line.endswith("cascade: a\tb café €")


def test_bidirectional_controls_are_escaped() -> None:
    # a right-to-left override in a logged path reordered the rest of the line as a viewer
    # showed it ("/v1/\u202etxt.exe" read as "/v1/exe.txt"), as in the CLI's tables
    line = TextFormatter().format(_record("404 GET %s", "/v1/\u202etxt.exe\u2066x\u2069\u200f"))
    assert "/v1/\\u202etxt.exe\\u2066x\\u2069\\u200f" in line
    assert not any(0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069 for c in line)
