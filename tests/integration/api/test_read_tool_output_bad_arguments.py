"""A call to ``read_tool_output`` with an argument it cannot use is answered with what is wrong.

Such an argument was dropped without a word: ``{"offset": -3}`` read from 0, ``{"limit":
"all"}`` and ``{"limit": 0}`` a whole page, ``{"grep": ["a", "b"]}`` a page with no search,
and a call without ``id`` read the id ``''``. The model took the page for the one it asked
for. Now each is answered with the argument and what it must be, as the tool-outputs API
answers the same values with a 400, and a valid call reads as before (an integer sent as
a JSON string too, a form models write).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import chat, history, read_call
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import blob, page_slice

ORIGINAL = blob(9000, "big")
BAD: dict[str, tuple[dict[str, Any], str]] = {
    "negative-offset": ({"id": "call_big", "offset": -3}, "offset"),
    "word-limit": ({"id": "call_big", "limit": "all"}, "limit"),
    "zero-limit": ({"id": "call_big", "limit": 0}, "limit"),
    "list-grep": ({"id": "call_big", "grep": ["a", "b"]}, "grep"),
    "bool-offset": ({"id": "call_big", "offset": True}, "offset"),
    "no-id": ({"offset": 10}, "id"),
}


def answer_to(proxy: ProxyServer, fake: FakeUpstream, sid: str, args: dict[str, Any]) -> str:
    fake.script(reply(None, tool_calls=[read_call(**args)]), reply("done"))
    assert chat(proxy, sid, history("call_big", ORIGINAL)).choices[0].message.content == "done"
    answered = fake.bodies()[-1]["messages"][-1]
    assert answered["role"] == "tool" and answered["tool_call_id"] == "int_1"
    return str(answered["content"])


@pytest.mark.parametrize("case", list(BAD))
def test_an_unusable_argument_is_answered_with_what_is_wrong(
    proxy: ProxyServer, fake_upstream: FakeUpstream, case: str
) -> None:
    args, name = BAD[case]
    text = answer_to(proxy, fake_upstream, f"bad-{case}", args)
    assert text.startswith(f"read_tool_output: invalid arguments ({name} "), text
    assert "big:" not in text


def test_an_integer_sent_as_a_string_still_reads(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    text = answer_to(
        proxy, fake_upstream, "string-int", {"id": "call_big", "offset": "1500", "limit": "100"}
    )
    assert page_slice(text) == (1500, 1600, 9000, ORIGINAL[1500:1600])


def test_arguments_nested_past_the_recursion_limit_are_answered_not_a_500(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """Arguments nested 10,000 levels are a ``RecursionError`` to the JSON reader, no
    ``ValueError``: the model's mistake, answered as any other unusable argument, and the
    turn ends in the provider's text (an integer past 4300 digits is a ``ValueError``
    already answered so)."""
    depth = 10_000
    deep = "[" * depth + "]" * depth
    call = tool_call("read_tool_output", f'{{"id": "call_big", "offset": {deep}}}', id="int_1")
    fake_upstream.script(reply(None, tool_calls=[call]), reply("done"))
    answer = chat(proxy, "deep-args", history("call_big", ORIGINAL))
    assert answer.choices[0].message.content == "done"
    text = str(fake_upstream.bodies()[-1]["messages"][-1]["content"])
    assert text.startswith("read_tool_output: invalid arguments (arguments nest too deep)"), text
