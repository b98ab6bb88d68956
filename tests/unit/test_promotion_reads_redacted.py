"""The fact extraction reads the folded span redacted with the patterns its facts are checked
with, whatever the agent's redaction: its content's text and parts and an assistant's refusal
parts alike (``span_text`` renders a refusal part's text too)."""

from __future__ import annotations

from proxy.cascade.redaction import compile_patterns
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
