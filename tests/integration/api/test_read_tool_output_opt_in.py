"""``toolOutput.offerWithoutTools``: a text-action agent on a provider with tool support
(smolagents' ``CodeAgent`` sends no ``tools``) can opt in to ``read_tool_output``. Its
tool-less requests then get the tool and the handles, and the proxy answers the model's call
itself as for any client; legacy ``functions`` still never get ``tools`` mixed in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import chat, context, history, read_call
from tests.integration.transcripts import blob, marker_args

FUNCTIONS = [{"name": "run_tests", "parameters": {"type": "object", "properties": {}}}]


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    ctx = context()
    ctx["toolOutput"]["offerWithoutTools"] = True
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)


def test_a_toolless_request_gets_the_tool_and_its_call_is_answered(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply(None, tool_calls=[read_call(id="call_big", offset=0, limit=500)]),
        reply("the answer"),
    )
    out = chat(proxy, "opt-in", history("call_big", blob(9000, "opt")), tools=None)
    assert out.choices[0].message.content == "the answer"
    assert not out.choices[0].message.tool_calls  # the client never sees the internal call
    first, second = fake_upstream.bodies()
    assert [t["function"]["name"] for t in first["tools"]] == ["read_tool_output"]
    args = marker_args(first["messages"][2]["content"])
    assert args is not None and args["id"] == "call_big@2"
    assert second["messages"][-1]["role"] == "tool"  # the page the proxy read for the model


def test_functions_are_still_never_mixed_with_tools(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    chat(
        proxy,
        "opt-in-functions",
        history("call_big", blob(9000, "fn")),
        tools=None,
        functions=FUNCTIONS,
    )
    body = fake_upstream.bodies()[-1]
    assert "tools" not in body and body["functions"] == FUNCTIONS
    assert "read_tool_output" not in json.dumps(body)
