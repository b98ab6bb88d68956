"""Where :func:`proxy.cascade.redaction.redact` tries each pattern: the start literals each
pattern's plan holds, the case fold that keeps positions, and the scanner that finds every
literal's starts (checked against the plain loop and a slow search)."""

from __future__ import annotations

import re
import string

from hypothesis import given, settings, strategies as st

from bench.redaction_speed import before
from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from proxy.cascade.redaction_scan import (
    MAX_LITERALS,
    candidates,
    fold,
    plan_of,
    scanner_for,
)

PATTERNS = compile_patterns(())
KEYED = 24  # the keyed pass: ``password=…``
_reference_redact = before  # the plain loop: every pattern's subn, in order


def test_every_default_pattern_is_only_tried_where_its_literal_occurs() -> None:
    starts = [plan_of(p).starts for p in PATTERNS]
    assert starts == [
        ("-----BEGIN ",),
        ("-----BEGIN ",),
        ("sk-ant-",),
        ("sk-",),
        ("rk_live_", "rk_test_", "sk_live_", "sk_test_"),
        ("AKIA", "ASIA"),
        ("gho_", "ghp_", "ghr_", "ghs_", "ghu_"),
        ("github_pat_",),
        ("hf_",),
        ("glpat-",),
        ("npm_",),
        ("xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"),
        ("AIza",),
        # a private key's PEM block in base64 (each kind read ahead), a Docker config in base64
        ("0tLS1CRUdJTiB",),
        ("eyJ",),
        ("eyJ",),
        # a URL path's secret (Telegram, Slack, Discord): from its host's domain
        ("discord.com", "discordapp.com", "slack.com", "telegram.org"),
        # a URL's password, or a token as its user, its slashes bare or escaped once or more
        # (never ``C:\\\\Users``)
        ("://", ":\\/\\/", ":\\\\/", ":\\\\\\"),
        ("bearer\t", "bearer "),
        starts[19],
        ("authorization",),
        # a secret keyed by its sibling, its key also in words (``"label": "API Key"``; the
        # keyed pass's ``secret`` begins ``secret key``)
        tuple(
            sorted(
                {
                    *starts[KEYED],
                    "authorization",
                    "access key",
                    "api key",
                    "auth key",
                    "private key",
                }
            )
        ),
        # the same pair, its value first (``{"value": …, "name": "DB_PASSWORD"}``)
        ("value",),
        # a key and value in a block indicator's comment, from the block's key
        starts[KEYED],
        starts[KEYED],
        # curl's basic auth, an .npmrc's _auth, a cookie header, an Azure account key
        (
            *("--proxy-user\t", "--proxy-user ", "--proxy-user="),
            *("--user\t", "--user ", "--user=", "-U\t", "-U ", '-U"', "-U'"),
            *("-u\t", "-u ", '-u"', "-u'"),
        ),
        # its pair glued to the option, on a curl command's line
        ("curl",),
        ("_auth",),
        ("cookie",),
        ("accountkey",),
        # curl's cookies on its command line, quoted
        (
            *("--cookie\t", "--cookie ", "--cookie="),
            *('-b\t"', "-b\t'", "-b\t\\", '-b "', "-b '", "-b \\"),
        ),
        # ... and bare, on a curl command's line
        ("curl",),
        # a bare ``pass`` after another word (``DB_PASS``), from the separator before it
        ("-pass", ".pass", "_pass"),
        # a bare ``PASS=``, a storage account's key as its SDKs spell it
        ("pass\t", "pass ", "pass="),
        ("account-key", "account_key", "accountkey"),
        # csh's ``setenv PASS …``
        ("setenv\t", "setenv "),
    ]
    assert starts[19] == ("secret",)  # its ``aws`` read behind: the keyed pass's literal
    assert {"password", "passwd", "pwd", "api_key", "apikey", "token", "credential"} <= set(
        starts[KEYED]
    )
    assert [plan_of(p).folded for p in PATTERNS].count(True) == 14
    # a literal without letters needs no exact-case check of its hits (``://`` is frequent)
    assert plan_of(PATTERNS[17]).keys == {
        "://": None,
        ":\\/\\/": None,
        ":\\\\/": None,
        ":\\\\\\": None,
    }
    # The built-in patterns' literals, lowercased, in automata read in one pass each.
    scanner = scanner_for(PATTERNS)
    assert set(scanner.literals) == {s.lower() for plan in starts for s in plan}
    # At most 64 in each: past that an automaton gives up its packed (SIMD) search and reads
    # a text several times slower (docs/perf.md). The first holds the literals of the
    # patterns that come first, as many as fit; its set is measured (README Decisions).
    assert all(len(a.literals) <= MAX_LITERALS == 64 for a in scanner.automata)
    assert len(scanner.automata[0].literals) == 64
    assert set(scanner.automata[1].literals) == {
        "-u ",
        "-u\t",
        '-u"',
        "-u'",
        "--cookie ",
        "--cookie\t",
        "--cookie=",
        "-b '",
        '-b "',
        "-b \\",
        "-b\t'",
        '-b\t"',
        "-b\t\\",
        "curl",
        "--user ",
        "--user\t",
        "--user=",
        "_auth",
        "cookie",
        "accountkey",
        "--proxy-user ",
        "--proxy-user\t",
        "--proxy-user=",
        "_pass",
        ".pass",
        "-pass",
        "pass=",
        "pass ",
        "pass\t",
        "account_key",
        "account-key",
        "setenv ",
        "setenv\t",
    }
    text = "x AKIA akia ghp_ ghx_ Token"
    found = scanner.find(text)
    assert found["akia"] == [2, 7] and found["ghp_"] == [12] and found["token"] == [22]
    assert candidates(found, text, plan_of(PATTERNS[5]), 100) == [2]  # case-sensitive: exact only
    assert candidates(found, text, plan_of(PATTERNS[KEYED]), 100) == [22]


def test_non_ascii_start_literals_make_a_plain_scan() -> None:
    # "Σ" lowers to "σ" or "ς" depending on what follows, so no position-keeping fold exists.
    pats = compile_patterns([r"ΑΣ=\w+", r"(?i)пароль=\w+"], use_defaults=False)
    assert [plan_of(p).starts for p in pats] == [(), ()]
    text = "ΑΣ=1 ΑΣΒ ПАРОЛЬ=x"
    assert redact(text, pats) == _reference_redact(text, pats) == (f"{REDACTED} ΑΣΒ {REDACTED}", 2)


def test_patterns_without_a_start_literal_are_scanned_whole() -> None:
    pats = compile_patterns([r"\d{4}-\d{4}", r"a|b*"], use_defaults=False)
    assert [plan_of(p).starts for p in pats] == [(), ()]
    assert redact("card 1234-5678.", pats[:1]) == (f"card {REDACTED}.", 1)


def test_fold_keeps_positions_of_every_case_insensitive_ascii_match() -> None:
    every = "".join(map(chr, range(0x80, 0x110000)))
    folded = fold(every)
    assert len(folded) == len(every)
    # The non-ASCII characters ``re`` matches to an ASCII letter when ignoring case.
    twins = set(re.findall("(?i)[a-z]", every))
    assert twins >= set("\u017f\u0131\u0130\u212a")  # ſ ı İ K(elvin)
    for letter in string.ascii_letters:
        for shape in (letter, f"[{letter}]"):
            for ch in twins:
                if re.fullmatch("(?i)" + shape, ch):
                    assert fold(ch) == letter.lower(), (hex(ord(ch)), letter)
    # The class finds them all: a scan of everything per letter (here the twins') finds no more.
    for letter in "sik":
        assert set(re.findall("(?i)" + letter, every)) <= twins


def test_dense_literals_fall_back_to_one_scan_with_the_same_result() -> None:
    text = "password " * 5000 + "token=abc123 " + "api_key" * 3000 + ": x"
    plan = plan_of(PATTERNS[KEYED])
    found = scanner_for(PATTERNS).find(text)
    assert candidates(found, text, plan, len(text) // 32 + 16) is None
    assert redact(text, PATTERNS) == _reference_redact(text, PATTERNS)
    assert redact(text, PATTERNS)[1] == 2


def _every_start(scanner: object, text: str) -> dict[str, list[int]]:
    """What ``find`` must report: each literal at every position it begins in the folded
    text, found the slow way."""
    folded = fold(text)
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
@settings(max_examples=300, deadline=None)
def test_find_reports_every_start_even_inside_another_match(text: str) -> None:
    # The automaton reports leftmost-first matches, which never overlap; the starts it skips
    # inside a match are checked separately, so nothing is lost.
    scanner = scanner_for(PATTERNS)
    assert scanner.find(text) == _every_start(scanner, text)


def test_find_reports_literals_that_begin_where_another_one_does() -> None:
    scanner = scanner_for(PATTERNS)
    found = scanner.find("x AWS_SECRET_ACCESS_KEY sk-ant-")
    assert found["secret"] == [6]
    assert found["access_key"] == [13]
    assert found["sk-"] == [24] and found["sk-ant-"] == [24]


@given(st.text(alphabet="ab1é", max_size=40))
@settings(deadline=None)
def test_find_reports_a_literal_overlapping_itself(text: str) -> None:
    pats = compile_patterns([r"aa\d", r"(?i)aba"], use_defaults=False)
    scanner = scanner_for(pats)
    assert scanner.find(text) == _every_start(scanner, text)
    assert redact(text, pats) == _reference_redact(text, pats)


# Many more literals than the automaton's packed search holds: configured patterns that
# begin with one of 150 distinct words, sharing prefixes in groups, and the defaults'.
_MANY = compile_patterns(
    [rf"(?i)kw{i:03d}x=\w+" for i in range(100)] + [rf"Tag{i:02d}:\d+" for i in range(50)]
)
_MANY_PIECES = st.sampled_from(
    ["kw0", "KW01", "07x=", "kw099x=z9", "Tag3", "tag31:7", "Tag49:1", "token=q1", "sk-", "x", " "]
)


def test_past_64_literals_each_automaton_holds_at_most_64() -> None:
    scanner = scanner_for(_MANY)
    assert len(scanner.literals) > 200
    assert [len(a.literals) for a in scanner.automata] == [64, 64, 64, 55]
    # The built-in patterns' literals come first: their automaton is the one they have alone.
    assert scanner.automata[0].literals == scanner_for(PATTERNS).automata[0].literals


@given(st.lists(_MANY_PIECES, max_size=30).map("".join))
@settings(max_examples=200, deadline=None)
def test_literals_sharing_a_key_are_each_found_where_they_begin(text: str) -> None:
    scanner = scanner_for(_MANY)
    assert scanner.find(text) == _every_start(scanner, text)
    assert redact(text, _MANY) == _reference_redact(text, _MANY)


def test_case_sensitive_starts_that_lowercase_alike_keep_only_exact_hits() -> None:
    pats = compile_patterns([r"(?:AB|ab)\d", r"(?i)cd\d"], use_defaults=False)
    assert plan_of(pats[0]).keys == {"ab": ("AB", "ab")} and plan_of(pats[1]).keys == {"cd": None}
    text = "Ab1 AB2 ab3 aB4 Cd5"
    assert redact(text, pats) == _reference_redact(text, pats)
    assert redact(text, pats) == (f"Ab1 {REDACTED} {REDACTED} aB4 {REDACTED}", 3)


# Configured literals past the defaults' first automaton that begin inside one another
# (``abab`` inside ``xabab``, ``bab`` inside ``abab``, ``aa`` inside itself): the starts a
# later automaton's leftmost-first search skips are checked there too.
_SPILLED = compile_patterns([r"(?i)xabab\d", r"abab\d", r"(?i)bab", r"aa\d"])


@given(st.text(alphabet="abx1", max_size=40))
@settings(max_examples=200, deadline=None)
def test_a_later_automaton_reports_literals_inside_its_matches(text: str) -> None:
    scanner = scanner_for(_SPILLED)
    assert {"xabab", "abab", "bab", "aa"} <= set(scanner.automata[-1].literals)
    assert scanner.find(text) == _every_start(scanner, text)
    assert redact(text, _SPILLED) == _reference_redact(text, _SPILLED)
