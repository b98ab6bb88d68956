from __future__ import annotations

import re
import string
import time

import pytest
from hypothesis import given, settings, strategies as st

from bench.redaction_speed import before
from proxy.cascade.redaction import (
    DEFAULT_PATTERNS,
    REDACTED,
    _candidates,
    _fold,
    _plan,
    _scanner,
    compile_patterns,
    redact,
    redact_message,
)
from tests.unit.cascade.builders import tool, user

PATTERNS = compile_patterns(())

# Fake credentials assembled at runtime so no scanner mistakes this file for a leak.
OPENAI = "sk-" + "A1b2C3d4" * 6
OPENAI_PROJ = "sk-proj-" + "Xy9_" * 12
ANTHROPIC = "sk-ant-api03-" + "q" * 40
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB = "ghp_" + "a" * 36
GITHUB_PAT = "github_pat_" + "11ABC" * 10
SLACK = "xoxb-" + "1234567890-abcdefghij"
GOOGLE = "AIza" + "S" * 35
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_RK = "rk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabcDEF123+/=\n"
    "-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    "secret",
    [
        OPENAI,
        OPENAI_PROJ,
        ANTHROPIC,
        AWS_ID,
        GITHUB,
        GITHUB_PAT,
        SLACK,
        GOOGLE,
        STRIPE,
        STRIPE_RK,
        JWT,
        PEM,
    ],
)
def test_token_shapes_are_redacted(secret: str) -> None:
    out, n = redact(f"before {secret} after", PATTERNS)
    assert secret not in out
    assert n == 1
    assert out == f"before {REDACTED} after"


def test_unterminated_pem_block_is_redacted() -> None:
    text = "key:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nMIIEvQ"
    out, n = redact(text, PATTERNS)
    assert "MIIEvQ" not in out and n == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=hunter22", f"password={REDACTED}"),
        ('{"password": "correct horse"}', f'{{"password": "{REDACTED}"}}'),
        ("DB_PASSWORD: s3cr3t!", f"DB_PASSWORD: {REDACTED}"),
        ("api_key = 'abc123xyz'", f"api_key = '{REDACTED}'"),
        ("export GITHUB_TOKEN=abcdef123", f"export GITHUB_TOKEN={REDACTED}"),
        (f"aws_secret_access_key = {AWS_SECRET}", f"aws_secret_access_key = {REDACTED}"),
        ("Authorization: Bearer abcdefgh12345678", f"Authorization: Bearer {REDACTED}"),
        (
            "curl -H 'authorization: bearer tok_12345678'",
            f"curl -H 'authorization: bearer {REDACTED}'",
        ),
        ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {REDACTED}"),
    ],
)
def test_assignments_keep_the_key_and_redact_the_value(text: str, expected: str) -> None:
    out, n = redact(text, PATTERNS)
    assert out == expected
    assert n == 1


@pytest.mark.parametrize(
    "text",
    [
        '{"prompt_tokens": 523, "max_tokens": 100}',
        "use_password: true",
        "the task-force ran a risk-assessment-framework-document-v2",
        "token_count: 12.5",
        "ordinary prose about passwords and tokens",
    ],
)
def test_non_secrets_are_left_alone(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


def test_redaction_is_idempotent() -> None:
    text = f"password={OPENAI} Authorization: Bearer {GITHUB} {PEM}"
    once, n = redact(text, PATTERNS)
    assert n >= 3
    assert redact(once, PATTERNS) == (once, 0)


@given(st.text(max_size=200))
@settings(max_examples=100, deadline=None)
def test_redaction_is_idempotent_on_any_text(text: str) -> None:
    once, _ = redact(text, PATTERNS)
    assert redact(once, PATTERNS) == (once, 0)


def test_secret_in_middle_of_multi_megabyte_text_is_found_quickly() -> None:
    filler = ("lorem ipsum = dolor, sit: amet {x: 1}\n" * 60_000)[:2_000_000]
    text = filler + f" {OPENAI} " + filler
    start = time.process_time()  # CPU time: other processes on the machine do not count
    out, n = redact(text, PATTERNS)
    assert n == 1 and OPENAI not in out
    assert time.process_time() - start < 2.0


def _pathological(k: int) -> str:
    return (
        "password" * 12_500 * k + "=" + "-----BEGIN PRIVATE KEY-----" * 500 * k + "a" * 25_000 * k
    )


def test_pathological_input_does_not_backtrack() -> None:
    """The cost grows linearly with the input: four times the text costs about four times
    the CPU (backtracking would cost sixteen times or far more). A ratio of CPU times in the
    same test, so a loaded machine does not fail it."""
    costs = []
    for k in (1, 4):
        text = _pathological(k)
        start = time.process_time()
        redact(text, PATTERNS)
        costs.append(time.process_time() - start)
    assert costs[1] < 8 * max(costs[0], 1e-3), costs


def test_custom_patterns_with_and_without_defaults() -> None:
    only_custom = compile_patterns([r"INTERNAL-\d{4}"], use_defaults=False)
    assert len(only_custom) == 1
    out, n = redact(f"INTERNAL-1234 {OPENAI}", only_custom)
    assert out == f"{REDACTED} {OPENAI}" and n == 1
    both = compile_patterns([r"INTERNAL-\d{4}"])
    assert len(both) == len(DEFAULT_PATTERNS) + 1
    assert redact(f"INTERNAL-1234 {OPENAI}", both) == (f"{REDACTED} {REDACTED}", 2)


def test_custom_pattern_secret_group_keeps_context() -> None:
    pats = compile_patterns([r"pin (?P<secret>\d{4})"], use_defaults=False)
    assert redact("my pin 1234.", pats) == (f"my pin {REDACTED}.", 1)


def test_compile_is_cached() -> None:
    assert compile_patterns(("a+",)) is compile_patterns(["a+"])


def test_invalid_pattern_is_a_readable_value_error() -> None:
    with pytest.raises(ValueError, match=r"invalid redaction pattern '\(unclosed'"):
        compile_patterns(["(unclosed"])


def test_redact_message_string_content() -> None:
    msg = tool("c1", f"key {OPENAI}")
    out, n = redact_message(msg, PATTERNS)
    assert n == 1 and out["content"] == f"key {REDACTED}"
    assert out["tool_call_id"] == "c1" and msg["content"] == f"key {OPENAI}"


def test_redact_message_text_parts() -> None:
    msg = {
        "role": "user",
        "content": [
            {"type": "text", "text": f"a {GITHUB}"},
            {"type": "image_url", "image_url": {"url": "https://x"}},
        ],
    }
    out, n = redact_message(msg, PATTERNS)
    assert n == 1
    assert out["content"][0] == {"type": "text", "text": f"a {REDACTED}"}
    assert out["content"][1] is msg["content"][1]


def test_redact_message_unchanged_is_same_object() -> None:
    msg = user("nothing here")
    assert redact_message(msg, PATTERNS) == (msg, 0)
    assert redact_message(msg, PATTERNS)[0] is msg
    empty = {"role": "assistant", "content": None}
    assert redact_message(empty, PATTERNS)[0] is empty


# --- the optimised redact against the straightforward loop ------------------------------------


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


def test_every_default_pattern_is_only_tried_where_its_literal_occurs() -> None:
    starts = [_plan(p).starts for p in PATTERNS]
    assert starts == [
        ("-----BEGIN ",),
        ("-----BEGIN ",),
        ("sk-ant-",),
        ("sk-",),
        ("rk_live_", "rk_test_", "sk_live_", "sk_test_"),
        ("AKIA", "ASIA"),
        starts[6],
        ("gho_", "ghp_", "ghr_", "ghs_", "ghu_"),
        ("github_pat_",),
        ("xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"),
        ("AIza",),
        ("eyJ",),
        ("bearer\t", "bearer "),
        ("authorization",),
        starts[-1],
    ]
    assert len(starts[6]) == 8 and "aws_secret_access_key" in starts[6]  # (?:_?) spelled out
    assert {"password", "passwd", "pwd", "api_key", "apikey", "token", "credential"} <= set(
        starts[-1]
    )
    assert [_plan(p).folded for p in PATTERNS].count(True) == 4
    # One automaton holds them all, lowercased: 24 literals read in one pass, not 24.
    scanner = _scanner(PATTERNS)
    assert set(scanner.literals) == {s.lower() for plan in starts for s in plan}
    text = "x AKIA akia ghp_ ghx_ Token"
    found = scanner.find(text)
    assert found["akia"] == [2, 7] and found["ghp_"] == [12] and found["token"] == [22]
    assert _candidates(found, text, _plan(PATTERNS[5]), 100) == [2]  # case-sensitive: exact only
    assert _candidates(found, text, _plan(PATTERNS[-1]), 100) == [22]


def test_non_ascii_start_literals_make_a_plain_scan() -> None:
    # "Σ" lowers to "σ" or "ς" depending on what follows, so no position-keeping fold exists.
    pats = compile_patterns([r"ΑΣ=\w+", r"(?i)пароль=\w+"], use_defaults=False)
    assert [_plan(p).starts for p in pats] == [(), ()]
    text = "ΑΣ=1 ΑΣΒ ПАРОЛЬ=x"
    assert redact(text, pats) == _reference_redact(text, pats) == (f"{REDACTED} ΑΣΒ {REDACTED}", 2)


def test_patterns_without_a_start_literal_are_scanned_whole() -> None:
    pats = compile_patterns([r"\d{4}-\d{4}", r"a|b*"], use_defaults=False)
    assert [_plan(p).starts for p in pats] == [(), ()]
    assert redact("card 1234-5678.", pats[:1]) == (f"card {REDACTED}.", 1)


def test_fold_keeps_positions_of_every_case_insensitive_ascii_match() -> None:
    every = "".join(map(chr, range(0x80, 0x110000)))
    folded = _fold(every)
    assert len(folded) == len(every)
    # The non-ASCII characters ``re`` matches to an ASCII letter when ignoring case.
    twins = set(re.findall("(?i)[a-z]", every))
    assert twins >= set("\u017f\u0131\u0130\u212a")  # ſ ı İ K(elvin)
    for letter in string.ascii_letters:
        for shape in (letter, f"[{letter}]"):
            for ch in twins:
                if re.fullmatch("(?i)" + shape, ch):
                    assert _fold(ch) == letter.lower(), (hex(ord(ch)), letter)
    # The class finds them all: a scan of everything per letter (here the twins') finds no more.
    for letter in "sik":
        assert set(re.findall("(?i)" + letter, every)) <= twins


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


def test_dense_literals_fall_back_to_one_scan_with_the_same_result() -> None:
    text = "password " * 5000 + "token=abc123 " + "api_key" * 3000 + ": x"
    plan = _plan(PATTERNS[-1])
    found = _scanner(PATTERNS).find(text)
    assert _candidates(found, text, plan, len(text) // 32 + 16) is None
    assert redact(text, PATTERNS) == _reference_redact(text, PATTERNS)
    assert redact(text, PATTERNS)[1] == 2


def _every_start(scanner: object, text: str) -> dict[str, list[int]]:
    """What ``find`` must report: each literal at every position it begins in the folded
    text, found the slow way."""
    folded = _fold(text)
    out = {
        literal: [i for i in range(len(folded)) if folded.startswith(literal, i)]
        for literal in scanner.literals  # type: ignore[attr-defined]
    }
    return {literal: at for literal, at in out.items() if at}


# Pieces that begin literals inside other literals: "sk-" and "sk-ant-" at one place,
# "secret" and "access_key" inside "aws_secret_access_key", "token" from the end of "secret".
_OVERLAPPING = st.sampled_from(
    [
        "sk-",
        "ant-",
        "SK-ANT-",
        "aws",
        "_secret",
        "_access",
        "_key",
        "AWS_SECRET_ACCESS_KEY",
        "secretoken",
        "tokens",
        "akia",
        "ai",
        "za",
        "eyj",
        "-----begin ",
        "xoxb-",
        "x",
        " ",
        "é",
        "\u0130",
        "password",
        "pwd",
    ]
)


@given(st.lists(_OVERLAPPING, max_size=30).map("".join))
@settings(max_examples=300)
def test_find_reports_every_start_even_inside_another_match(text: str) -> None:
    # The automaton reports leftmost-first matches, which never overlap; the starts it skips
    # inside a match are checked separately, so nothing is lost.
    scanner = _scanner(PATTERNS)
    assert scanner.find(text) == _every_start(scanner, text)


def test_find_reports_literals_that_begin_where_another_one_does() -> None:
    scanner = _scanner(PATTERNS)
    found = scanner.find("x AWS_SECRET_ACCESS_KEY sk-ant-")
    assert found["aws_secret_access_key"] == [2] and found["secret"] == [6]
    assert found["access_key"] == [13]
    assert found["sk-"] == [24] and found["sk-ant-"] == [24]


@given(st.text(alphabet="ab1é", max_size=40))
def test_find_reports_a_literal_overlapping_itself(text: str) -> None:
    pats = compile_patterns([r"aa\d", r"(?i)aba"], use_defaults=False)
    scanner = _scanner(pats)
    assert scanner.find(text) == _every_start(scanner, text)
    assert redact(text, pats) == _reference_redact(text, pats)


def test_case_sensitive_starts_that_lowercase_alike_keep_only_exact_hits() -> None:
    pats = compile_patterns([r"(?:AB|ab)\d", r"(?i)cd\d"], use_defaults=False)
    assert _plan(pats[0]).keys == {"ab": ("AB", "ab")} and _plan(pats[1]).keys == {"cd": None}
    text = "Ab1 AB2 ab3 aB4 Cd5"
    assert redact(text, pats) == _reference_redact(text, pats)
    assert redact(text, pats) == (f"Ab1 {REDACTED} {REDACTED} aB4 {REDACTED}", 3)
