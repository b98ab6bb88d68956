"""A page ``read_tool_output`` reads back fits the window the step's prompt left.

The overflow guard fits the step's prompt to the window less the reserved output; an internal
round then sends that prompt again with the model's call and the page read. A page of the
full ``maxChars`` on a prompt near its budget took the round's prompt past the window, which a
provider refuses: the client got an error for a request that fit. The page is cut to the
room left instead (it names where the next one starts), both streamed and whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.cascade.tokens import make_counter
from tests.fakes.replies import RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import chat, read_call
from tests.integration.transcripts import blob, page_slice

LIMIT = 8000
RESERVED = 500
MAX_CHARS = 8000
COUNT = make_counter(None)


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    context = {
        "toolOutput": {"maxChars": MAX_CHARS, "persistRaw": True, "compact": False},
        "eviction": {"enabled": False},
        "summarize": {"enabled": False},
    }
    models = {"default": {"contextLimit": LIMIT, "reservedOutput": RESERVED}}
    return write_config(tmp_path / "agents.json", fake_upstream.url, models=models, context=context)


def counted(answer: Reply) -> Any:
    """``answer`` with the prompt's usage as the proxy's own estimate counts it, so the
    session's calibration stays at 1 whichever tokenizer the proxy loaded."""

    def respond(req: RecordedRequest) -> Reply:
        usage = (COUNT(req.json["messages"]), 5)
        return reply(answer.content, tool_calls=list(answer.tool_calls) or None, usage=usage)

    return respond


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_page_read_near_the_budget_is_cut_to_the_room_left(
    stream: bool, proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    original = blob(20000, "big")
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "look at big"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": original},
    ]
    fake_upstream.script(counted(reply("seen")))
    chat(proxy, "near", messages)
    first = COUNT(fake_upstream.bodies()[-1]["messages"])
    filler = "w lorem " * int((0.9 * (LIMIT - RESERVED) - first - 300) * 4 / 8)
    messages += [{"role": "assistant", "content": "seen"}, {"role": "user", "content": filler}]

    fake_upstream.script(
        counted(reply(None, tool_calls=[read_call("int_1", id="c1", offset=5600)])),
        counted(reply("done")),
    )
    out = chat(proxy, "near", messages, stream=stream)
    text = (
        "".join(c.choices[0].delta.content or "" for c in out if c.choices)
        if stream
        else (out.choices[0].message.content)
    )
    assert text == "done"
    step, internal = fake_upstream.bodies()[-2:]
    assert COUNT(step["messages"]) <= LIMIT - RESERVED, "the step's own prompt did not fit"
    assert COUNT(internal["messages"]) <= LIMIT - RESERVED, "the page overflowed the window"
    a, b, total, page = page_slice(internal["messages"][-1]["content"])
    assert (a, total) == (5600, len(original)) and page == original[a:b] and b > a
