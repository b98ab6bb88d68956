"""A secret split across a message's text parts (a tool that flushed its output in chunks,
each chunk a part; a client that sends a pasted key as two parts) is still the secret: a
model reads the parts one after the other, and the store would hold both halves side by
side. ``redact_message`` redacts the parts' text as one text, and keeps the parts."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from proxy.cascade import redaction
from proxy.cascade.redaction import (
    REDACTED,
    compile_patterns,
    redact,
    redact_message,
)
from proxy.cascade.redaction_calls import redact_written
from proxy.cascade.redaction_parts import redact_across
from proxy.cascade.redaction_scan import starts_of
from tests.unit.cascade.fake_credentials import AWS_ID, GITHUB, JWT, OPENAI, PEM

PATTERNS = compile_patterns(())


def _parts(*texts: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": t} for t in texts]


def _tool(*texts: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "c1", "content": _parts(*texts)}


def test_a_token_split_across_two_parts_is_redacted() -> None:
    out, n = redact_message(_tool(f"out {GITHUB[:20]}", f"{GITHUB[20:]} done"), PATTERNS)
    assert n >= 1
    assert out["content"] == _parts(f"out {REDACTED}", " done")
    assert "".join(p["text"] for p in out["content"]).count("a" * 8) == 0


def test_a_token_across_three_parts_empties_the_middle_one() -> None:
    out, n = redact_message(_tool(OPENAI[:10], OPENAI[10:30], OPENAI[30:] + " tail"), PATTERNS)
    assert n >= 1
    assert out["content"] == _parts(REDACTED, "", " tail")


def test_an_assignment_split_keeps_its_key_and_redacts_the_value() -> None:
    msg = {"role": "user", "content": _parts("export password=", "hunter2letmein", " end")}
    out, n = redact_message(msg, PATTERNS)
    assert n >= 1
    text = "".join(p["text"] for p in out["content"])
    assert "hunter2" not in text and text.startswith("export password=")
    assert out["content"][2] == {"type": "text", "text": " end"}


def test_other_parts_and_whole_secrets_are_kept_as_they_were() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://x"}}
    msg = {"role": "user", "content": [*_parts(f"a {GITHUB}", "b"), image, *_parts("c")]}
    out, n = redact_message(msg, PATTERNS)
    assert n == 1
    assert out["content"] == [*_parts(f"a {REDACTED}", "b"), image, *_parts("c")]
    assert out["content"][2] is image
    clean = _tool("nothing ", "here")
    assert redact_message(clean, PATTERNS) == (clean, 0)
    assert redact_message(clean, PATTERNS)[0] is clean


def test_what_a_model_reads_of_a_split_token_is_redacted() -> None:
    """``redact_written`` (the summary's input) reads the parts the same way."""
    out, _ = redact_written(_tool(GITHUB[:12], GITHUB[12:]), PATTERNS)
    assert out["content"] == _parts(REDACTED, "")


_WORDS = st.sampled_from(
    [" x ", "\n", "abc", " token: ", "password=hunter2x", GITHUB, OPENAI, AWS_ID, JWT, PEM]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_WORDS, min_size=1, max_size=8), st.lists(st.integers(0, 2000), max_size=4))
def test_the_pieces_joined_are_the_joined_text_redacted(words: list[str], cuts: list[int]) -> None:
    text = "".join(words)
    at = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *at], [*at, len(text)], strict=True)]
    for starts in (None, starts_of(PATTERNS)):  # everywhere, or where a match can begin
        out, n = redact_across(pieces, PATTERNS, starts)
        assert ("".join(out), n) == redact(text, PATTERNS)
        assert len(out) == len(pieces)


def _large_output() -> dict[str, Any]:
    """A 5 MB tool output flushed a line per part, one of them holding a key."""
    line = "INFO worker processed item 12345 in 3ms ok\n"
    text = line * (2_500_000 // len(line)) + f"k {GITHUB[:10]}\n" + line * (2_500_000 // len(line))
    msg = _tool(*text.splitlines(keepends=True))
    msg["content"][7] = {"type": "text", "text": f"{OPENAI} "}
    return msg


def test_a_large_output_in_many_parts_costs_about_what_its_joined_text_does() -> None:
    """The parts' cost is linear: a few times the redaction of their text joined, what is
    left being the loop over the 100 000 parts (no pass per part over the whole text)."""
    msg = _large_output()

    def best(run: Any) -> float:
        times = []
        for _ in range(3):
            began = time.process_time()  # CPU time: other processes on the machine do not count
            run()
            times.append(time.process_time() - began)
        return min(times)

    joined = "".join(p["text"] for p in msg["content"])
    once = best(lambda: redact(joined, PATTERNS))
    parts = best(lambda: redact_message(msg, PATTERNS))
    assert parts < 20 * once, (parts, once)


def test_only_a_part_holding_a_literal_is_redacted_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: each part was redacted alone before the joined pass, a ``redact`` call per
    part (each finding no literal, in most), which cost several times the redaction of the
    text joined on a large output, and tens of times in small parts, on the one event loop.
    Only a part in which a pattern's literal begins can hold a match alone; the literals
    of the parts joined are found in one pass."""
    msg = _large_output()
    calls: list[int] = []

    def counted(text: str, patterns: Any) -> tuple[str, int]:
        calls.append(len(text))
        return redact(text, patterns)

    monkeypatch.setattr(redaction, "redact", counted)
    out, n = redaction.redact_message(msg, PATTERNS)
    assert n == 1 and out["content"][7] == {"type": "text", "text": f"{REDACTED} "}
    assert len(out["content"]) == len(msg["content"])
    assert len(calls) <= 4, len(calls)  # the two parts with a literal, and the joined text


@settings(max_examples=200, deadline=None)
@given(st.lists(_WORDS, min_size=1, max_size=8), st.lists(st.integers(0, 2000), max_size=6))
def test_parts_without_a_literal_skipped_change_nothing(words: list[str], cuts: list[int]) -> None:
    """The parts come back as when every part is redacted alone, then all as one text."""
    text = "".join(words)
    at = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *at], [*at, len(text)], strict=True)]
    alone = [redact(p, PATTERNS) for p in pieces]
    want, n = [p for p, _ in alone], sum(k for _, k in alone)
    if len(pieces) > 1 and redact("".join(want), PATTERNS)[1]:
        want, more = redact_across(want, PATTERNS, None)
        n += more
    out, got = redact_message(_tool(*pieces), PATTERNS)
    assert ([p["text"] for p in out["content"]], got) == (want, n)


def test_a_part_that_is_no_text_ends_the_text_the_parts_make() -> None:
    """Regression: the text parts were joined across an image (or audio) part between them,
    so a user's "Type the password:" above a screenshot and "Then press Enter" below it read
    as ``password:Then``: "Then" was cut from the second part, and the first gained a
    ``[REDACTED]`` that stood for no secret. The model reads an image between the two, not
    one text; text parts side by side still read as one."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    for between in (image, audio):
        msg = {"role": "user", "content": [*_parts("Type the password:"), between, *_parts("Then")]}
        assert redact_message(msg, PATTERNS) == (msg, 0)
    split = [*_parts(GITHUB[:12], GITHUB[12:20]), image, *_parts(GITHUB[:12], GITHUB[12:])]
    out, n = redact_message({"role": "user", "content": split}, PATTERNS)
    assert n == 1
    assert out["content"] == [*_parts(GITHUB[:12], GITHUB[12:20]), image, *_parts(REDACTED, "")]
