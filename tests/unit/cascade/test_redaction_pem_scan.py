"""The PEM pattern's search for a block's END line stops at the next run of five dashes (a
key's body never holds one): it read up to its 20,000 characters from every BEGIN line, so
a message of BEGIN lines alone (a few hundred kilobytes, from any client) held the event
loop, every tenant's requests with it, for seconds."""

from __future__ import annotations

import json
import time

from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from tests.unit.cascade.fake_credentials import PEM

_PATTERNS = compile_patterns((), use_defaults=True)
_BEGIN = "-----BEGIN RSA PRIVATE KEY-----\n"


def test_begin_lines_alone_are_read_in_one_pass() -> None:
    text = _BEGIN * 20_000
    started = time.process_time()  # CPU time: a loaded machine's other work is not counted
    out, n = redact(text, _PATTERNS)
    assert "PRIVATE KEY" not in out and n >= 1
    assert time.process_time() - started < 1.5  # the search was quadratic: seconds


def test_a_whole_block_is_still_redacted_whole() -> None:
    for text in (f"key:\n{PEM}\nafter", f"{_BEGIN}{PEM}\nafter", f"{PEM}\n{PEM}"):
        out, _ = redact(text, _PATTERNS)
        assert "PRIVATE KEY" not in out and "MII" not in out, out
    assert redact(f"a {PEM} b", _PATTERNS)[0] == f"a {REDACTED} b"


def test_a_block_a_diff_removes_is_redacted_to_its_end_line_and_no_further() -> None:
    """A diff that removes a key (``git show``, ``git log -p``) puts a dash before each of
    its lines: its END line follows a sixth dash. The block ends there, and the diff after
    it is read as it was, not taken by the pattern for a block whose END line is missing."""
    removed = "\n".join("-" + line for line in PEM.splitlines())
    text = f"@@ -1,4 +0,0 @@\n{removed}\ndiff --git a/setup.py b/setup.py\nindex 1..2\n"
    out, n = redact(text, _PATTERNS)
    assert out == f"@@ -1,4 +0,0 @@\n-{REDACTED}\ndiff --git a/setup.py b/setup.py\nindex 1..2\n"
    assert n == 1


def test_a_block_cut_short_in_json_text_is_redacted_past_its_escaped_newlines() -> None:
    """In JSON text (a call's arguments, an object's as they are redacted) a key's lines are
    joined by ``\\n`` escapes: the pattern for a block whose END line is missing stopped at
    the first backslash, and the key's body went on; it now reads the escapes as lines, and
    leaves the text JSON."""
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
    text = json.dumps({"content": _BEGIN + body + "\n" + body + "\r\n\t" + body, "n": 1})
    out, n = redact(text, _PATTERNS)
    assert n == 1 and body not in out, out
    assert json.loads(out) == {"content": REDACTED, "n": 1}
