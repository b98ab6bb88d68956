"""The optimised :func:`proxy.cascade.redaction.redact` against the straightforward loop (every
pattern's ``subn``, in order): random texts with secrets of every default kind, configured
patterns, Unicode case twins, and matches that touch."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings, strategies as st

from bench.redaction_speed import before
from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from tests.unit.cascade.fake_credentials import PEM

PATTERNS = compile_patterns(())
_reference_redact = before  # the plain loop: every pattern's subn, in order


_ALNUM = string.ascii_letters + string.digits
_B64 = _ALNUM + "+/="
# Characters ``re`` matches case-insensitively to ASCII letters, and other non-ASCII ones.
_UNICODE = "\u017f\u0131\u0130\u212a\u00df\u00e9\u03a3\u2192\u4e2d"


def _run(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=lo, max_size=hi)


@st.composite
def _anycase(draw: st.DrawFn, word: str) -> str:
    """``word`` in random case, sometimes with a Unicode letter ``re`` treats as its twin."""
    twins = {"s": "s\u017f", "i": "i\u0131\u0130", "k": "k\u212a"}
    out = []
    for ch in word:
        options = ch.lower() + ch.upper() + twins.get(ch.lower(), "")[1:]
        out.append(draw(st.sampled_from(options)) if ch.isalpha() else ch)
    return "".join(out)


def _seq(*parts: st.SearchStrategy[str] | str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.just(p) if isinstance(p, str) else p for p in parts)).map("".join)


_WS = st.sampled_from(["", " ", "\t", "  ", " \t ", "      "])  # the last one is too long
_QUOTE = st.sampled_from(["", '"', "'"])
_OP = st.sampled_from(["=", ":", "=>", " = ", ": ", "-"])
_KEYWORDS = ["password", "passwd", "pwd", "secret", "token", "api_key", "api-key", "apikey"]
_KEYWORDS += ["access_key", "private-key", "privatekey", "auth_key", "credential", "credentials"]
_VALUE = st.one_of(
    _run(_ALNUM + "!@#$%^&*-_./", 1, 30),
    _seq('"', _run(_ALNUM + " !:'", 0, 20), '"'),
    _seq("'", _run(_ALNUM + ' !:"', 0, 20), "'"),
    st.sampled_from(["100", "12.5", "true", "null", "None", REDACTED, f'"{REDACTED}"', ""]),
)

# One strategy per default pattern, with near misses (too short, wrong case, no value …).
KINDS = (
    _seq(
        "-----BEGIN ",
        st.sampled_from(["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED RSA "]),
        st.sampled_from(["PRIVATE KEY-----", "PUBLIC KEY-----", "private key-----"]),
        _run(_B64 + "\n", 0, 80),
        st.sampled_from(["", "-----END PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----"]),
    ),
    _seq(
        "sk-",
        st.sampled_from(["", "ant-", "ant-api03-", "proj-", "svcacct-", "admin-"]),
        _run(_ALNUM + "_-", 15, 40),
    ),
    _seq(
        st.sampled_from(["sk", "rk", "pk"]),
        "_",
        st.sampled_from(["live", "test", "prod"]),
        "_",
        _run(_ALNUM, 8, 30),
    ),
    _seq(
        " ",
        st.sampled_from(["AKIA", "ASIA", "akia"]),
        st.sampled_from([15, 16, 16, 17]).flatmap(
            lambda n: _run(string.ascii_uppercase + "01", n, n)
        ),
    ),
    _seq(
        _anycase("aws"),
        st.sampled_from(["_", ""]),
        _anycase("secret"),
        st.sampled_from(["_", ""]),
        _anycase("access"),
        st.sampled_from(["_", ""]),
        _anycase("key"),
        _QUOTE,
        _WS,
        _OP,
        _WS,
        _QUOTE,
        st.sampled_from([39, 40, 40, 41]).flatmap(lambda n: _run(_B64, n, n)),
        " ",
    ),
    _seq("gh", st.sampled_from("pousrx"), "_", _run(_ALNUM, 25, 40)),
    _seq("github_pat_", _run(_ALNUM + "_", 25, 40)),
    _seq("xox", st.sampled_from("baprsz"), "-", _run(_ALNUM + "-", 5, 30)),
    _seq("AIza", _run(_ALNUM + "_-", 30, 38)),
    _seq(
        "eyJ",
        _run(_ALNUM + "_-", 3, 20),
        ".eyJ",
        _run(_ALNUM + "_-", 3, 20),
        ".",
        _run(_ALNUM + "_-", 0, 20),
    ),
    _seq(
        _anycase("bearer"),
        _WS,
        st.sampled_from(["", "", REDACTED]),
        _run(_ALNUM + "-._~+/=", 6, 30),
    ),
    _seq(
        _anycase("authorization"),
        _QUOTE,
        _WS,
        st.sampled_from([":", "="]),
        _WS,
        _QUOTE,
        st.sampled_from(["basic", "Basic", "TOKEN", "bearer"]),
        st.sampled_from([" ", "\t", "  ", ""]),
        st.sampled_from(["", "", REDACTED]),
        _run(_ALNUM + "+/=._-", 6, 30),
    ),
    _seq(
        _run(_ALNUM + "_", 0, 4),
        st.sampled_from(_KEYWORDS).flatmap(_anycase),
        _run(string.ascii_lowercase + "_.-", 0, 6),
        _QUOTE,
        _WS,
        _OP,
        _WS,
        _VALUE,
    ),
)
SECRETS = st.one_of(*KINDS)
FILLER = st.one_of(
    _run(string.printable, 0, 40),
    _run(_UNICODE + " =:_-", 1, 8),
    st.sampled_from(["sk-", "gh", "xox", "AIza", "eyJ", "token", "-----BEGIN ", REDACTED, "\n"]),
)


@st.composite
def _texts(draw: st.DrawFn, filler: st.SearchStrategy[str] = FILLER) -> str:
    """Random filler with a secret of every default kind spliced in at random places."""
    text = "".join(draw(st.lists(filler, max_size=12)))
    edge = st.sampled_from(["", " ", " ", "\n", '"', "=", "x", "-"])
    for kind in draw(st.permutations(KINDS)):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(edge) + draw(kind) + draw(edge) + text[at:]
    return text


@given(_texts())
@settings(max_examples=100, deadline=None)
def test_redact_equals_the_plain_loop_on_texts_with_secrets(text: str) -> None:
    assert redact(text, PATTERNS) == _reference_redact(text, PATTERNS)


@given(_texts(_run(string.ascii_letters + " \n.,:=_-", 0, 60)))
@settings(max_examples=50, deadline=None)
def test_redact_equals_the_plain_loop_with_secrets_inside_prose(text: str) -> None:
    assert redact(text, PATTERNS) == _reference_redact(text, PATTERNS)


@given(st.lists(FILLER, max_size=12).map("".join))
@settings(max_examples=50, deadline=None)
def test_redact_returns_text_without_secrets_unchanged(text: str) -> None:
    out = redact(text, PATTERNS)
    assert out == _reference_redact(text, PATTERNS)
    if out[1] == 0:
        assert out[0] is text


CUSTOM = compile_patterns(
    [
        r"(?i)internal-\d{4}",
        r"pin (?P<secret>\d{4})",
        r"[A-Z]{3}-\d{3}",  # no start literal: always scanned
        r"(?:ab|cd)+e",
        r"\bkey\b",
        r"(?i:ab)CD",
        r"(?<=id=)\w+",
        r"(?-i:Q)?zz|yy",
        r"(?x) s e c ",
    ]
) + (
    re.compile("SeCrEt", re.IGNORECASE),
    re.compile("[\u017fs]ecret"),
    re.compile("x*"),  # matches the empty string: always scanned (last: it matches everywhere)
)
CUSTOM_PIECES = st.one_of(
    _seq(_anycase("internal"), "-", _run(string.digits, 3, 5)),
    _seq("pin ", _run(string.digits, 3, 5)),
    _seq(_run("ABCXYZ", 3, 3), "-", _run(string.digits, 3, 3)),
    _run("abcde", 1, 8),
    st.sampled_from(["key", " key ", "keys", "id=x1", "Qzz", "qzz", "yy", "sec ", "xx"]),
    _seq(_anycase("abcd"), _run("Cc", 0, 1)),
    _anycase("secret"),
)


@given(_texts(st.one_of(FILLER, CUSTOM_PIECES)))
@settings(max_examples=50, deadline=None)
def test_redact_equals_the_plain_loop_with_configured_patterns(text: str) -> None:
    assert redact(text, CUSTOM) == _reference_redact(text, CUSTOM)


@pytest.mark.parametrize(
    "text",
    [
        "pa\u017f\u017fword=hunter2",
        "PR\u0130VATE_KEY: abc",
        "\u212aey: TO\u212aEN=xyz123",
        "\u00e9 pwd=1a",
    ],
)
def test_unicode_case_twins_are_redacted_like_the_plain_loop(text: str) -> None:
    out = redact(text, PATTERNS)
    assert out == _reference_redact(text, PATTERNS)
    assert out[1] == 1


@pytest.mark.parametrize(
    "text", ['password="a"token="b"', PEM + PEM, 'Bearer abcdefgh1234"Bearer zyxwvuts8765']
)
def test_a_match_right_where_the_previous_one_ended_is_found(text: str) -> None:
    assert redact(text, PATTERNS) == _reference_redact(text, PATTERNS)
    assert redact(text, PATTERNS)[1] == 2


def test_a_pattern_sees_the_text_as_earlier_patterns_left_it() -> None:
    # Both PEM patterns look for "-----BEGIN ": the second must not reuse positions found
    # before the first replaced a whole block.
    text = f"{PEM}\nnext key:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B"
    out = redact(text, PATTERNS)
    assert out == _reference_redact(text, PATTERNS)
    assert out == (f"{REDACTED}\nnext key:\n{REDACTED}", 2)
