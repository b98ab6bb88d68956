"""Shell and command-line spellings of a password: curl's glued ``-ubob:pw`` late on a long
line, ``PASS = x``, csh's ``setenv``, a space-separated ``--password X``; and what is none: a
variable's reference (``PASS=$X``), a test runner's counts (``PASS=12 FAIL=0``)."""

from __future__ import annotations

import json

import pytest

from proxy.cascade.redaction import REDACT_PAST, REDACTED, compile_patterns, redact

PATTERNS = compile_patterns(())
_TOKEN = "Zq8vW2pL9kXr4tYb7nM3"
_HEADERS = " ".join(f"-H 'X-Header-{i}: value-{i}'" for i in range(30))


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # curl's glued pair past many headers on its line
        (
            f"curl -s {_HEADERS} -ubob:{_TOKEN} https://h/",
            f"curl -s {_HEADERS} -ubob:{REDACTED} https://h/",
        ),
        # ... and on a continuation line after many
        (
            f"curl -s \\\n  {_HEADERS} \\\n  -ubob:{_TOKEN} https://h/",
            f"curl -s \\\n  {_HEADERS} \\\n  -ubob:{REDACTED} https://h/",
        ),
        # ... a bare cookie too
        (
            f"curl -s {_HEADERS} -b sid={_TOKEN} https://h/",
            f"curl -s {_HEADERS} -b {REDACTED} https://h/",
        ),
        # a bare PASS with blanks around its ``=`` (an .env or .ini file's)
        (f"PASS = {_TOKEN}", f"PASS = {REDACTED}"),
        (f"pass\t=\t{_TOKEN}", f"pass\t=\t{REDACTED}"),
        # a ``$`` before a name in mixed case is a password's, no variable's
        ("PASSWORD=$Secr3tPw", f"PASSWORD={REDACTED}"),
        ('"password": "$Secr3tPw"', f'"password": "{REDACTED}"'),
        # csh's setenv
        (f"setenv PASS {_TOKEN}", f"setenv PASS {REDACTED}"),
        (f"setenv DB_PASSWORD '{_TOKEN}'", f"setenv DB_PASSWORD '{REDACTED}'"),
        (f"setenv API_TOKEN {_TOKEN}", f"setenv API_TOKEN {REDACTED}"),
        # a space-separated option's value on any command line
        (f"mysql -u root --password {_TOKEN} db", f"mysql -u root --password {REDACTED} db"),
        (f"gh auth login --token {_TOKEN}", f"gh auth login --token {REDACTED}"),
        (f"tool --api-key {_TOKEN} run", f"tool --api-key {REDACTED} run"),
        (f"tool --api-key '{_TOKEN}' run", f"tool --api-key '{REDACTED}' run"),
        (f'tool --client-secret "{_TOKEN}"', f'tool --client-secret "{REDACTED}"'),
        (
            json.dumps({"cmd": f'docker login --password "{_TOKEN}" -u bob'}),
            json.dumps({"cmd": f'docker login --password "{REDACTED}" -u bob'}),
        ),
    ],
)
def test_a_shell_spelling_of_a_password_is_redacted(text: str, kept: str) -> None:
    out, n = redact(text, PATTERNS)
    assert (out, n) == (kept, 1)
    assert redact(out, PATTERNS) == (out, 0)


@pytest.mark.parametrize(
    "text",
    [
        # a variable's reference holds no secret
        "PASS=$X",
        "PASS=${X}",
        'export PASS="$DB_PASS"',
        "PASSWORD=$PASSWORD",
        "PASSWORD=${DB_PASSWORD}",
        "DB_PASS=${DB_PASS} ./run.sh",
        '{"env": "PASSWORD=${PW}"}',
        "setenv PASS $X",
        'mysql --password "$MYSQL_PWD" db',
        "gh auth login --token $GH_TOKEN",
        # a test runner's counts and verdicts
        "PASS=FAIL",
        "PASS=12 FAIL=0",
        "tests: PASS=3",
        "PASS=PASSED",
        "PASS = 12",
        # comparisons, help text, other options
        'if [ "$PASS" == yes ]; then',
        "PASS == FAIL",
        "  --password PASSWORD   the password to log in with",
        "  --token string   an access token",
        "  --api-key <key>   your key",
        "docker login --password-stdin -u bob",
        "tool --token-file ~/.token run",
        "mysql --password -u root",
        "gh auth login --with-token < token.txt",
        "setenv PATH /usr/bin",
    ],
)
def test_what_is_no_password_stays(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


def test_a_long_curl_line_reads_no_further_than_redact_past() -> None:
    """The glued pair's line is read to a bounded length: a pair past it stays, and the
    match is within ``REDACT_PAST`` (what ``redact_head`` reads past its cut)."""
    near = f"curl -s {'-H x ' * 600}-ubob:{_TOKEN} https://h/"
    far = f"curl -s {'-H x ' * 1200}-ubob:{_TOKEN} https://h/"
    assert len(near) < REDACT_PAST < len(far)
    assert _TOKEN not in redact(near, PATTERNS)[0]
    assert redact(far, PATTERNS) == (far, 0)


def test_curl_repeated_on_a_line_is_read_in_linear_time() -> None:
    import time

    for unit in ("curl ", "curl -H x ", "curl -uuu "):
        start = time.perf_counter()
        redact(unit * 5_000, PATTERNS)
        assert time.perf_counter() - start < 1.5, unit


def _nest(doc: object, depth: int) -> str:
    text = json.dumps(doc)
    for _ in range(depth - 1):
        text = json.dumps({"l": text})
    return text


def _unnest(text: str, depth: int) -> object:
    doc = json.loads(text)
    for _ in range(depth - 1):
        doc = json.loads(doc["l"])
    return doc


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("key", ["PASS=", "accountKey: ", "setenv PASS "])
def test_a_single_quoted_value_after_a_bare_key_is_not_read_across_a_strings_end(
    key: str, depth: int
) -> None:
    """A bare ``PASS=``'s ``'`` value whose closing quote lies in a later string (its
    backslashes before the string's end) is no value: the text stays JSON at every depth."""
    doc = {"n": f"{key}'-b 9\\\\:\n9\\\\", "b": {"k": "a'9"}}
    _unnest(redact(_nest(doc, depth), PATTERNS)[0], depth)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # a plain word is a password people set: only a placeholder's or prose's word is none
        ("mysql --password hunter db", f"mysql --password {REDACTED} db"),
        ("tool --token correcthorse", f"tool --token {REDACTED}"),
        ("--password changeme", f"--password {REDACTED}"),
        # a quoted value holds blanks
        ("tool --password 'a b c' run", f"tool --password '{REDACTED}' run"),
        (
            json.dumps({"cmd": 'login --password "open sesame" -u bob'}),
            json.dumps({"cmd": f'login --password "{REDACTED}" -u bob'}),
        ),
        # a ``$`` before a name in mixed case is a password's, as after a key
        ("tool --password $Secr3tPw", f"tool --password {REDACTED}"),
    ],
)
def test_an_options_plain_quoted_or_dollar_value_is_redacted(text: str, kept: str) -> None:
    assert redact(text, PATTERNS) == (kept, 1)


@pytest.mark.parametrize(
    "text",
    [
        "give the key with --api-key or CASCADE_API_KEY",
        "pass --token to the command, --password for mysql",
        "  --password value   the password",
        "  --token TEXT  a token",
        "  --api-key key   your key",
        "  --secret secret  the secret",
        "tool --password *** run",
        "tool --password $(cat ~/.pw) run",
    ],
)
def test_an_options_placeholder_or_prose_word_stays(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("value", ["--password ", "x --token ", "--api-key\t"])
def test_an_option_at_a_strings_end_reads_no_value_across_it(value: str, depth: int) -> None:
    """An option ending a JSON string (``"--password ", "b": "c"``): the quote after it ends
    the string, and what follows it to the next string's quote is no value."""
    doc = {"n": value, "b": [{"k": "a b"}], "c": value}
    assert _unnest(redact(_nest(doc, depth), PATTERNS)[0], depth) == doc


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("mysql \\\n  --password \\\n  Hunter22 db", f"mysql \\\n  --password \\\n  {REDACTED} db"),
        (
            json.dumps({"cmd": "login --token \\\n  gho_Zq8vW2pL9k \\\n  -u bob"}),
            json.dumps({"cmd": f"login --token \\\n  {REDACTED} \\\n  -u bob"}),
        ),
    ],
)
def test_an_options_value_on_its_continuation_line_is_redacted(text: str, kept: str) -> None:
    assert redact(text, PATTERNS) == (kept, 1)


def test_an_option_before_a_continuation_line_of_options_stays() -> None:
    text = "docker login \\\n  --password \\\n  --username bob"
    assert redact(text, PATTERNS) == (text, 0)
