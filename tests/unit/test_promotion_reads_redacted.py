"""The fact extraction reads the folded span redacted with the patterns its facts are checked
with, whatever the agent's redaction: its content's text and parts and an assistant's refusal
parts alike (``span_text`` renders a refusal part's text too). Only what it reads is
redacted: the newest messages' role and content, not the older ones it cuts away nor a
call's arguments; a span the compaction redacted already is marked once."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from proxy.cascade.memory import sanitize_fact, span_text
from proxy.cascade.redaction import compile_patterns, redact
from proxy.cascade.redaction_calls import redact_written
from proxy.services import promotion
from proxy.services.promotion import promote
from tests.unit.test_promotion_bounds import _count, _job, _Lent, _Upstream

SECRET = "hunter2abc"


async def _read(job: object, span: list[dict[str, object]]) -> str:
    """What the fast model reads of ``span``: promotion run once on a recording upstream."""
    upstream = _Upstream()
    await promote(upstream, None, _Lent(), job, span, count=_count)  # type: ignore[arg-type]
    [body] = upstream.bodies
    return str(body["messages"][-1]["content"])


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
    text = await _read(job, span)
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

    def counted(text: str, pats: Sequence[re.Pattern[str]]) -> tuple[str, int]:
        calls.append(text)
        return redact(text, pats)

    monkeypatch.setattr(promotion, "redact", counted)
    job = _job(320000)
    job.memory_patterns = patterns
    whole = span_text([redact_written(m, patterns)[0] for m in span])
    assert await _read(job, span) == whole and SECRET not in whole
    assert len(calls) <= 13, len(calls)


async def test_a_span_the_compaction_redacted_reads_as_redacted_once() -> None:
    """A global scope's patterns hold another agent's beside the built-in ones the compaction
    already applied: the second pass leaves each ``[REDACTED]`` as it was (no pattern reads
    the marker) and the text is what one pass with the scope's patterns makes."""
    agent = compile_patterns(())
    scope = compile_patterns((r"acme-[0-9a-f]{8}",))
    raw = [
        {"role": "user", "content": f'config {{"password": "{SECRET}"}} and key acme-0badc0de'},
        {"role": "tool", "content": f"export API_TOKEN={SECRET}\nAuthorization: Bearer {SECRET}"},
    ]
    job = _job(32000)
    job.memory_patterns, job.redaction = scope, agent
    folded = [redact_written(m, agent)[0] for m in raw]  # as the compaction hands it on
    text = await _read(job, folded)
    assert text == span_text([redact_written(m, scope)[0] for m in raw])
    assert SECRET not in text and "acme-0badc0de" not in text and "[[REDACTED]" not in text


async def test_tool_call_arguments_never_reach_the_extraction() -> None:
    """``span_text`` renders a message's content only: a call's arguments, as text or as an
    object, are not read, with the agent's redaction on or off."""
    calls = [
        {"id": "a", "type": "function", "function": {"name": "sh", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "sh", "arguments": {}}},
    ]
    calls[0]["function"]["arguments"] = f'{{"cmd": "deploy", "password": "{SECRET}"}}'
    calls[1]["function"]["arguments"] = {"cmd": "deploy", "note": f"pw {SECRET}"}
    span = [
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "a", "content": "deployed"},
    ]
    for redaction in ((), compile_patterns(())):
        job = _job(32000)
        job.memory_patterns, job.redaction = compile_patterns(()), redaction
        assert await _read(job, span) == "[tool]\ndeployed"


async def test_arguments_the_extraction_does_not_read_are_not_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent that writes files through its calls folds spans of large arguments beside
    short results: redacting those arguments would be event-loop work for text no model
    reads here."""
    seen: list[str] = []

    def counted(text: str, pats: Sequence[re.Pattern[str]]) -> tuple[str, int]:
        seen.append(text)
        return redact(text, pats)

    monkeypatch.setattr(promotion, "redact", counted)
    body = {"path": "a.py", "text": f"password = '{SECRET}'\n" + "x = 1\n" * 1000}
    call = {"id": "w", "type": "function", "function": {"name": "write", "arguments": body}}
    span = [
        {"role": "assistant", "content": "writing", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "w", "content": "ok"},
    ]
    job = _job(32000)
    job.memory_patterns = compile_patterns(())
    assert await _read(job, span) == "[assistant]\nwriting\n\n[tool]\nok"
    assert seen == ["ok", "writing"]


@pytest.mark.parametrize("agent_redaction", [(), compile_patterns(())])
async def test_a_secret_in_a_form_the_fact_check_reads_through_is_never_shown(
    agent_redaction: tuple[re.Pattern[str], ...],
) -> None:
    """``sanitize_fact`` reads a fact without its zero-width and joiner characters and with
    fullwidth letters as plain ones, so it refuses ``ｐａｓｓｗｏｒｄ: "…"``; the extraction,
    reading the span raw, showed the fast model that value, which it could restate in words
    ("the staging password is …") no check reads. It reads the span in the fact check's form."""
    span = [
        {"role": "user", "content": f'the config is ｐａｓｓｗｏｒｄ: "{SECRET}1"'},
        {"role": "tool", "content": f'pass\u200bword: "{SECRET}2" and api\u200d_key="{SECRET}3"'},
        {"role": "user", "content": "we deploy with make release"},
    ]
    job = _job(32000)
    job.memory_patterns, job.redaction = compile_patterns(()), agent_redaction
    text = await _read(job, span)
    assert SECRET not in text and text.count("[REDACTED]") == 3, text
    assert text.endswith("we deploy with make release")


@pytest.mark.parametrize(
    "hidden", ["\x00", "\x1b", "\x7f", "\u200d", "\u00ad", "\u034f", "\ufe0f", "\u3164"]
)
async def test_a_secret_split_by_a_character_no_reader_sees_is_never_shown(hidden: str) -> None:
    """``sanitize_fact`` reads a fact without control characters as without format ones, so
    it refuses ``pass\\x00word: "…"``; the extraction's form kept the controls, so the fast
    model was shown the value a fact holding it would be refused for."""
    secret = f'pass{hidden}word: "{SECRET}"'
    assert not sanitize_fact(secret, patterns=compile_patterns(())).ok
    job = _job(32000)
    job.memory_patterns = compile_patterns(())
    text = await _read(job, [{"role": "tool", "content": f"the config holds {secret}"}])
    assert SECRET not in text and text.count("[REDACTED]") == 1, repr(text)


async def test_what_span_text_renders_of_any_role_is_redacted() -> None:
    """``span_text`` renders a ``refusal`` part whatever the message's role (a client's
    rebuilt history may hold one in a user turn), so the extraction redacts the text it
    renders, not the parts a role is expected to hold."""
    span = [{"role": "user", "content": [{"type": "refusal", "refusal": f"PASSWORD='{SECRET}'"}]}]
    job = _job(32000)
    job.memory_patterns = compile_patterns(())
    assert await _read(job, span) == "[user]\nPASSWORD='[REDACTED]'"


async def test_text_whose_read_form_holds_no_secret_is_read_as_sent() -> None:
    """Folding changes what legitimate text says: Persian loses the non-joiner that spells
    ``می‌خواهم``, an emoji family falls apart without its joiners, a flag of Scotland loses
    its tags and ``10⁹`` reads ``109``; a fact the fast model took from that form would be
    stored so. A message is read folded only when the fold shows a secret the raw text hid."""
    scotland = "🏴" + "".join(chr(0xE0000 + ord(c)) for c in "gbsct") + "\U000e007f"
    legit = f"می\u200cخواهم 👩\u200d👩\u200d👧 {scotland} 10⁹ ｶﾅ"
    span = [
        {"role": "user", "content": legit},
        {"role": "tool", "content": f'ｐａｓｓｗｏｒｄ: "{SECRET}1" می\u200cخواهم'},
    ]
    job = _job(32000)
    job.memory_patterns = compile_patterns(())
    text = await _read(job, span)
    assert text.startswith(f"[user]\n{legit}\n\n[tool]\n"), text
    assert SECRET not in text and text.count("[REDACTED]") == 1, text


async def test_a_secret_only_the_raw_form_shows_is_redacted_in_a_folded_message() -> None:
    """A message read folded (its folded form holds a secret) is folded after its raw form
    is redacted: a scope's pattern written in fullwidth letters matches the raw text alone,
    and the fast model would read its value folded, in letters no check of a fact reads."""
    job = _job(32000)
    job.memory_patterns = compile_patterns(("ＡＣＭＥ-[0-9]+",))
    span = [{"role": "user", "content": f'ＡＣＭＥ-123 ｐａｓｓｗｏｒｄ: "{SECRET}"'}]
    text = await _read(job, span)
    assert "123" not in text and SECRET not in text and text.count("[REDACTED]") == 2, text
