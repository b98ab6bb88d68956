"""A secret split across a message's text parts (a tool that flushed its output in chunks,
each chunk a part; a client that sends a pasted key as two parts) is still the secret: a
model reads the parts one after the other, and the store would hold both halves side by
side. ``redact_message`` redacts the parts' text as one text, and keeps the parts."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings, strategies as st

from proxy.cascade.redaction import (
    REDACTED,
    _starts,
    compile_patterns,
    redact,
    redact_message,
    redact_written,
)
from proxy.cascade.redaction_parts import redact_across
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
    for starts in (None, _starts(PATTERNS)):  # everywhere, or where a match can begin
        out, n = redact_across(pieces, PATTERNS, starts)
        assert ("".join(out), n) == redact(text, PATTERNS)
        assert len(out) == len(pieces)
