"""What the rolling summary's fast model reads of a message, redacted: besides its text, the
summary renders content that is one object (its JSON text), a part that is no text and no
object (itself), an object part's ``type`` (``[type]``), a message's ``name`` and its tool
calls' names beside their arguments; each is redacted by ``redact_written``, which a
compaction runs over its span."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns
from proxy.cascade.redaction_calls import redact_written
from proxy.cascade.summary import build_prompt
from proxy.cascade.types import CompactionPlan

_PATTERNS = compile_patterns(())
_SECRET = "hunter2secret"


def _summary_input(msg: dict[str, Any]) -> str:
    """The fast model's prompt text for a span of ``msg`` redacted as a compaction does."""
    read, _ = redact_written(msg, _PATTERNS)
    assert redact_written(read, _PATTERNS) == (read, 0)
    plan = CompactionPlan(start=0, end=1, span=(read,), previous=None)
    return str(build_prompt(plan, max_input_tokens=100_000, count=lambda ms: 10)[1]["content"])


@pytest.mark.parametrize(
    "msg",
    [
        {"role": "user", "content": {"type": "note", "body": f"password: {_SECRET}"}},
        {"role": "user", "content": [{"type": "text", "text": "x"}, [f"password: {_SECRET}"]]},
        {"role": "user", "content": [{"type": f"password={_SECRET}"}]},
        {"role": "tool", "tool_call_id": "c1", "name": f"token={_SECRET}", "content": "ok"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "function": {"name": f"api_key={_SECRET}", "arguments": "{}"}}
            ],
        },
        {"role": "assistant", "content": None, "function_call": {"name": f"pwd={_SECRET}"}},
    ],
)
def test_what_the_summary_renders_besides_text_is_redacted(msg: dict[str, Any]) -> None:
    body = _summary_input(msg)
    assert _SECRET not in body and REDACTED in body


def test_content_and_parts_keep_their_shape_and_media_is_left_as_sent() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUtJQQ=="}}
    msg = {"role": "user", "content": [image, [f"token: {_SECRET}", 3], 7]}
    read, n = redact_written(msg, _PATTERNS)
    assert n == 1 and read["content"] == [image, [f"token: {REDACTED}", 3], 7]
    one = {"role": "user", "content": {"note": f"password: {_SECRET}", "n": 2}}
    read, n = redact_written(one, _PATTERNS)
    assert n == 1 and read["content"] == {"note": f"password: {REDACTED}", "n": 2}
    plain = {"role": "user", "name": "alice", "content": [image, {"type": "input_audio"}]}
    assert redact_written(plain, _PATTERNS) == (plain, 0)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "document", "source": {"type": "text", "data": f"password: {_SECRET}"}},
        {"type": "tool_result", "content": [{"type": "text", "text": f"token={_SECRET}"}]},
        {"type": "custom_note", "body": f"api_key: {_SECRET}", "n": 2},
    ],
)
def test_an_object_part_of_a_type_no_model_reads_as_media_loses_its_secret(
    part: dict[str, Any],
) -> None:
    """A part of a type the proxy does not know (an Anthropic-shaped ``document`` or
    ``tool_result`` a lenient gateway reads, a client's own) is text the model may read, and
    is stored: its entries are redacted as its JSON text, keeping its shape; a media part's
    (an image's data) are left as sent."""
    msg = {"role": "user", "content": [{"type": "text", "text": "see"}, part]}
    read, n = redact_written(msg, _PATTERNS)
    assert n == 1 and _SECRET not in str(read) and REDACTED in str(read["content"][1])
    assert read["content"][1].keys() == part.keys() and read["content"][0] == msg["content"][0]
    assert redact_written(read, _PATTERNS) == (read, 0)
