"""The literal scan of :mod:`proxy.cascade.redaction` on the texts it is tuned for.

The scan reads the lowercased bytes of a text (ASCII, or UTF-8 with byte offsets turned into
character positions) and returns early when no literal occurs. These tests hold it to the
plain loop (every pattern's ``subn``) on non-ASCII text, at text and line boundaries, on
overlapping literals and case variants, and on realistic inputs: the benchmark's agent
workload and, when ``../shared/data/trajectories`` is there, the recorded transcripts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings, strategies as st

from bench.loadgen_workload import make_workload
from bench.redaction_speed import before
from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from proxy.cascade.redaction_scan import scanner_for
from tests.unit.cascade.test_redaction_literals import _every_start

PATTERNS = compile_patterns(())

# Fake credentials assembled at runtime so no scanner mistakes this file for a leak.
OPENAI = "sk-" + "A1b2C3d4" * 6
GITHUB = "ghp_" + "a" * 36
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"


# Literals that begin inside others, their case variants, and characters of every UTF-8
# width (2, 3 and 4 bytes, a lone surrogate), the four case twins of ASCII letters among them.
_PIECES = st.sampled_from(
    [
        "sk-",
        "SK-ANT-",
        "Token",
        "TOKEN",
        "secretoken",
        "aws_SECRET_access_KEY",
        "PassWord",
        "api-key",
        "AkIa",
        "AKIA",
        "eyJ",
        "=",
        ": ",
        "x",
        "\n",
        "é",
        "中文",
        "😀",
        "\ud83d",
        "\u212a",
        "\u0130",
        "\u0131",
        "\u017f",
    ]
)


@given(st.lists(_PIECES, max_size=30).map("".join))
@settings(max_examples=400, deadline=None)
def test_find_reports_every_start_in_text_of_any_width(text: str) -> None:
    scanner = scanner_for(PATTERNS)
    assert scanner.find(text) == _every_start(scanner, text)


@given(st.lists(_PIECES | st.sampled_from([OPENAI, GITHUB, AWS_ID, "abc123"]), max_size=20))
@settings(max_examples=300, deadline=None)
def test_redact_matches_the_plain_loop_in_text_of_any_width(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert redact(text, PATTERNS) == before(text, PATTERNS)


# Before a secret, what is not a word character (a word character before ``sk-`` makes it
# part of a longer word, which the patterns leave alone).
@pytest.mark.parametrize("pad", ["", "é ", "中:", "😀", "\ud800", "a\n", "é\n", "😀\r\n"])
@pytest.mark.parametrize(
    ("secret", "shown"),
    [
        (OPENAI, REDACTED),
        (GITHUB, REDACTED),
        ("password=hunter22", f"password={REDACTED}"),
        ("TOKEN: abc123", f"TOKEN: {REDACTED}"),
        ("Bearer abcdefgh12345678", f"Bearer {REDACTED}"),
    ],
)
def test_a_secret_at_either_end_of_a_text_or_line_is_redacted(
    pad: str, secret: str, shown: str
) -> None:
    for text, expected in (
        (secret, shown),
        (pad + secret, pad + shown),
        (secret + "\n" + pad, shown + "\n" + pad),
        (pad * 3 + secret + "\n" + pad + secret, pad * 3 + shown + "\n" + pad + shown),
    ):
        out = redact(text, PATTERNS)
        assert out == before(text, PATTERNS) == (expected, expected.count(REDACTED))


@pytest.mark.parametrize(
    "text",
    [
        "ça va, password=hunter22",  # Latin-1 text: one byte per character in the str
        "日本語 token = abc123 and pwd: 'x y'",  # three UTF-8 bytes per character
        "🔑 " * 50 + "API_KEY=abcdef123",  # four
        "\u212a: to\u212aen=abc123 é",  # a twin: folded as a str
        "paſſword=hunter22 😀",
    ],
)
def test_non_ascii_texts_are_redacted_where_the_plain_loop_redacts(text: str) -> None:
    out = redact(text, PATTERNS)
    assert out == before(text, PATTERNS) and out[1] >= 1


def test_texts_without_any_literal_still_run_the_unanchored_patterns() -> None:
    # No default pattern's literal occurs, so the anchored ones are skipped in one look; the
    # configured pattern has no literal and runs all the same.
    pats = compile_patterns([r"\d{4}-\d{4}"])
    assert redact("card 1234-5678, é", pats) == (f"card {REDACTED}, é", 1)
    assert redact("nothing here", compile_patterns((), use_defaults=False)) == ("nothing here", 0)
    text = "nothing to see, ça va"
    assert redact(text, PATTERNS)[0] is text


def _workload_texts() -> Iterator[str]:
    workload = make_workload("large")
    for msg in workload.base:
        if isinstance(msg.get("content"), str):
            yield msg["content"]
    yield workload.tool_result


def test_the_agent_workload_is_redacted_exactly_as_by_the_plain_loop() -> None:
    texts = list(_workload_texts())
    assert sum(map(len, texts)) > 100_000
    for text in texts:
        assert redact(text, PATTERNS) == before(text, PATTERNS)


def _transcript_texts(number: int) -> list[str]:
    from bench import trajectories

    source = trajectories.resolve(number)
    if not source.path.exists():
        pytest.skip(f"{source.name} is not in ../shared/data/trajectories")
    seen: dict[int, str] = {}
    for step in trajectories.steps(source):
        for msg in (*step.prompt, step.reply):
            content = msg.get("content")
            parts = content if isinstance(content, list) else [{"text": content}]
            for part in parts:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str):
                    seen.setdefault(id(text), text)
    return list(seen.values())


@pytest.mark.parametrize("number", [1, 2, 4, 6])
def test_recorded_transcripts_are_redacted_exactly_as_by_the_plain_loop(number: int) -> None:
    for text in _transcript_texts(number):
        assert redact(text, PATTERNS) == before(text, PATTERNS)


def test_a_literal_that_an_earlier_replacement_creates_is_found() -> None:
    # The second pattern's literal occurs only in the first one's replacement: the patterns
    # worth trying are worked out again after every replacement, as the plain loop sees it.
    pats = compile_patterns([r"secret\d", r"(?i)dacted\]"], use_defaults=False)
    assert redact("a secret1 b", pats) == before("a secret1 b", pats)
    assert redact("a secret1 b", pats) == (f"a [RE{REDACTED} b", 2)
