"""The fact extraction reads the folded span redacted with the patterns its facts are checked
with, whatever the agent's redaction: its content's text and parts and an assistant's refusal
parts alike (``span_text`` renders a refusal part's text too)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from proxy.cascade.memory import span_text
from proxy.cascade.redaction import compile_patterns
from proxy.cascade.redaction_calls import redact_written
from proxy.cascade.types import Message
from proxy.services import promotion
from proxy.services.promotion import promote
from tests.unit.test_promotion_bounds import _count, _job, _Lent, _Upstream

SECRET = "hunter2abc"


async def test_the_extraction_reads_no_secret_of_the_span() -> None:
    span = [
        {"role": "user", "content": f'the config is {{"password": "{SECRET}"}}'},
        {"role": "tool", "content": [{"type": "text", "text": f"PASSWORD='{SECRET}'"}]},
        {
            "role": "assistant",
            "content": [{"type": "refusal", "refusal": f'I will not print "pwd": "{SECRET}"'}],
        },
        {"role": "user", "content": "we deploy with make release"},
    ]
    job = _job(32000)
    job.memory_patterns = compile_patterns(())  # the agent's redaction off: redaction=()
    upstream = _Upstream()
    await promote(upstream, None, _Lent(), job, span, count=_count)  # type: ignore[arg-type]
    [body] = upstream.bodies
    text = body["messages"][-1]["content"]
    assert SECRET not in text and text.count("[REDACTED]") == 3, text
    assert text.endswith("we deploy with make release")


async def test_only_the_messages_the_extraction_reads_are_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``span_text`` keeps the span's newest 60,000 characters: a long span's older messages
    are never read, so redacting them (on the event loop) would be work for nothing."""
    patterns = compile_patterns(())
    span = [
        {"role": "tool", "content": f"step {i}: password={SECRET}{i} " + "x" * 5000}
        for i in range(200)
    ]
    calls = []

    def counted(msg: Message, pats: Sequence[re.Pattern[str]]) -> tuple[Message, int]:
        calls.append(msg)
        return redact_written(msg, pats)

    monkeypatch.setattr(promotion, "redact_written", counted)
    job = _job(320000)
    job.memory_patterns = patterns
    upstream = _Upstream()
    await promote(upstream, None, _Lent(), job, span, count=_count)  # type: ignore[arg-type]
    [body] = upstream.bodies
    whole = span_text([redact_written(m, patterns)[0] for m in span])
    assert body["messages"][-1]["content"] == whole and SECRET not in whole
    assert len(calls) <= 13, len(calls)
