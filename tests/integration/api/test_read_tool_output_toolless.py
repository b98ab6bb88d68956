"""``read_tool_output`` goes upstream only beside the client's own ``tools``.

Once a tool result was cut, the proxy added its tool to every request, even one that sent no
``tools`` (a model or server without tool support then fails the request) or legacy
``functions`` (OpenAI refuses ``tools`` mixed with them). Now such a request goes with its
own shape, and its cut results say to re-run the tool instead of naming one it lacks; the
stored rows keep their handles, and a later request with tools sends them again, byte for
byte.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import (
    CLIENT_TOOLS,
    assert_valid_history,
    chat,
    history,
    read_call,
)
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob, marker_args

FUNCTIONS = [{"name": "run_tests", "parameters": {"type": "object", "properties": {}}}]
CASES: dict[str, tuple[dict[str, Any], list[str] | None]] = {
    "no-tools": ({"tools": None}, None),
    "functions": ({"tools": None, "functions": FUNCTIONS}, None),
    "tool-choice-none": (
        {"tools": CLIENT_TOOLS, "tool_choice": "none"},
        ["run_tests", "read_tool_output"],
    ),
    "tools": ({"tools": CLIENT_TOOLS}, ["run_tests", "read_tool_output"]),
}


def text(body: dict[str, Any]) -> str:
    return json.dumps(body)


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
@pytest.mark.parametrize("case", list(CASES))
def test_what_goes_upstream_after_a_cut_result(
    proxy: ProxyServer, fake_upstream: FakeUpstream, case: str, stream: bool
) -> None:
    kw, tools = CASES[case]
    out = chat(
        proxy, f"{case}-{stream}", history("call_big", blob(9000, case)), stream=stream, **kw
    )
    if stream:
        list(out)
    body = fake_upstream.bodies()[-1]
    cut = body["messages"][2]["content"]
    if tools is None:
        assert "tools" not in body and "tool_choice" not in body
        assert "read_tool_output" not in text(body)
        assert "[... truncated " in cut and "re-run the tool if you need the rest" in cut
    else:
        assert [t["function"]["name"] for t in body["tools"]] == tools
        assert marker_args(cut) is not None and marker_args(cut)["id"] == "call_big@2"
    assert body.get("functions") == kw.get("functions")
    assert body.get("tool_choice") == kw.get("tool_choice")


def test_a_request_without_tools_after_the_model_read_a_result(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    sid = "read-then-toolless"
    messages = history("call_big", blob(9000, "big"))
    fake_upstream.script(
        reply(None, tool_calls=[read_call(id="call_big", offset=0, limit=500)]),
        reply("the answer"),
        reply("a summary"),
        reply("next"),
        reply("and again"),
    )
    first = chat(proxy, sid, messages)
    assert first.choices[0].message.content == "the answer"
    assert len(fake_upstream.bodies()) == 2  # the proxy answered the call itself
    handled = fake_upstream.bodies()[0]["messages"]

    # The client's history holds no call to the proxy's tool: a request without tools is whole.
    messages += [
        {"role": "assistant", "content": "the answer"},
        {"role": "user", "content": "sum up"},
    ]
    second = chat(proxy, sid, messages, tools=None)
    assert second.choices[0].message.content == "a summary"
    toolless = fake_upstream.bodies()[-1]
    assert "tools" not in toolless and "read_tool_output" not in text(toolless)
    assert_valid_history(toolless["messages"])

    # The stored rows keep their handle; the client's form is the original.
    with api(proxy) as http:
        rows = http.get(f"/v1/sessions/{sid}/messages").json()["data"]
        sent = http.get(f"/v1/sessions/{sid}/messages", params={"form": "sent"}).json()["data"]
    assert rows[2]["message"]["content"] == handled[2]["content"]
    assert sent[2]["message"] == messages[2]

    # With tools again the handles come back byte for byte (the provider's cached prefix).
    messages += [
        {"role": "assistant", "content": "a summary"},
        {"role": "user", "content": "go on"},
    ]
    chat(proxy, sid, messages)
    again = fake_upstream.bodies()[-1]
    assert again["messages"][:3] == handled[:3] and "read_tool_output" in text(again["tools"])

    # Without tools once more: the prompt before is the same bytes as the last one without.
    messages += [{"role": "assistant", "content": "next"}, {"role": "user", "content": "last"}]
    chat(proxy, sid, messages, tools=None)
    later = fake_upstream.bodies()[-1]
    assert later["messages"][: len(toolless["messages"])] == toolless["messages"]
    assert "tools" not in later
