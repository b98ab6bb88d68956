"""A client whose own ``tools`` define ``read_tool_output`` keeps that name.

The proxy used to append its own schema anyway, so the provider got two tools of one name,
and it answered the client's calls itself ("no stored output with id …"): the client never
saw a call to a tool it had defined. Now, when the client defines the name, the proxy offers
nothing and intercepts nothing; the model's calls reach the client like any other.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS, chat, history, read_call
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import blob

OWN = {
    "type": "function",
    "function": {
        "name": "read_tool_output",
        "description": "the client's own: reads an entry of the client's cache",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
}


def _names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_the_clients_own_read_tool_output_is_the_clients(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.script(reply(None, tool_calls=[read_call("call_own", id="cache-7")]))
    # The history holds a cut result, so the proxy would offer its own tool.
    messages = history("call_big", blob(9000, "big"))
    tools = [*CLIENT_TOOLS, OWN]
    if stream:
        chunks = list(chat(proxy, "own", messages, tools=tools, stream=True))
        calls = [
            tc
            for c in chunks
            if c.choices
            for tc in (c.choices[0].delta.tool_calls or [])
            if tc.function and tc.function.name
        ]
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        names = [tc.function.name for tc in calls]
    else:
        out = chat(proxy, "own", messages, tools=tools)
        finish = out.choices[0].finish_reason
        names = [tc.function.name for tc in out.choices[0].message.tool_calls or []]
    assert names == ["read_tool_output"] and finish == "tool_calls"
    bodies = fake_upstream.bodies()
    assert len(bodies) == 1  # no internal round
    assert _names(bodies[0]) == ["run_tests", "read_tool_output"]
    assert bodies[0]["tools"][1] == OWN


def test_without_a_client_tool_of_that_name_the_proxy_still_answers_it(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply(None, tool_calls=[read_call("int_1", id="call_big", offset=0)]), reply("done")
    )
    out = chat(proxy, "theirs", history("call_big", blob(9000, "big")), tools=CLIENT_TOOLS)
    assert out.choices[0].message.content == "done"
    bodies = fake_upstream.bodies()
    assert len(bodies) == 2
    assert _names(bodies[0]) == ["run_tests", "read_tool_output"]
