"""A fast model's answer whose content is a list of parts (some OpenAI-compatible servers
answer so, a reasoning model's thinking in a part of its own) is read as its text parts
joined, as a message's text is everywhere else: its briefing is usable, not the list's repr."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from proxy.cascade.briefing import parse_briefing
from proxy.services.fastmodel import read_fast_answer

_BRIEFING = (
    "## Objective\nFix the parser\n\n## Decisions & Facts\n- keep the public API\n\n"
    "## Files & State\n(none)\n\n## Open Tasks\n- finish the fix\n\n## Next Step\nrun the tests"
)


class _Reply:
    status_code = 200

    def __init__(self, content: Any) -> None:
        message = {"role": "assistant", "content": content}
        self.text = json.dumps({"choices": [{"index": 0, "message": message}]})

    def json(self) -> Any:
        return json.loads(self.text)


def test_an_answer_in_parts_reads_as_its_text_parts() -> None:
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "## Objective\nno"}]}
    reply = _Reply([thinking, {"type": "text", "text": _BRIEFING}])
    status, text = read_fast_answer(SimpleNamespace(fast_model="fast"), reply)
    assert status == 200 and text == _BRIEFING
    assert parse_briefing(text) == _BRIEFING


def test_a_string_answer_is_read_as_it_is() -> None:
    _, text = read_fast_answer(SimpleNamespace(fast_model="fast"), _Reply(_BRIEFING))
    assert text == _BRIEFING
