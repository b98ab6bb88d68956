"""LangChain's ChatOpenAI (langchain-openai) through the proxy: ``bind_tools``, ``invoke`` and
``stream`` with ``stream_usage``, a tool loop whose first output the proxy cuts and whose
model reads it back in a step that also calls the client's tool (tests/integration/api/
frameworks.py). LangChain resends the whole history each step, without a session id."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.frameworks import (
    PART2,
    STEP2,
    SYSTEM,
    check_provider_side,
    no_internal_call,
    proxy,
    read_log_text,
    script,
)

lc_openai = pytest.importorskip("langchain_openai")
lc_messages = pytest.importorskip("langchain_core.messages")
lc_tools = pytest.importorskip("langchain_core.tools")

__all__ = ["proxy"]


@lc_tools.tool
def read_log(part: int) -> str:
    """Reads one part of the service log."""
    return read_log_text(part)


def step(llm: Any, messages: list[Any], *, stream: bool) -> Any:
    if not stream:
        return llm.invoke(messages)
    chunks = list(llm.stream(messages))
    assert len({c.id for c in chunks}) == 1, "one message per step, across the proxy's rounds"
    message = chunks[0]
    for chunk in chunks[1:]:
        message = message + chunk
    return message


def run(llm: Any, messages: list[Any], *, stream: bool) -> list[Any]:
    """The agent loop: step until the model answers without a tool call."""
    replies = []
    while True:
        ai = step(llm, messages, stream=stream)
        replies.append(ai)
        messages.append(ai)
        if not ai.tool_calls:
            return replies
        messages.extend(read_log.invoke(call) for call in ai.tool_calls)


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_tool_loop_with_a_cut_output_read_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    script(fake_upstream)
    llm = lc_openai.ChatOpenAI(
        model="gpt-4o", base_url=proxy.url, api_key="sk-test-client", stream_usage=True
    ).bind_tools([read_log])
    messages: list[Any] = [
        lc_messages.SystemMessage(SYSTEM),
        lc_messages.HumanMessage("How many requests failed?"),
    ]
    replies = run(llm, messages, stream=stream)

    calls = [c for r in replies for c in r.tool_calls]
    no_internal_call([c["name"] for c in calls])
    assert [(c["id"], c["args"]) for c in calls] == [
        ("call_1", {"part": 1}),
        ("call_2", {"part": 2}),
    ]
    assert not any(r.invalid_tool_calls for r in replies)
    assert messages[5].content == PART2 and replies[-1].content == "3 failed"
    usage = [r.usage_metadata for r in replies]
    assert [(u["input_tokens"], u["output_tokens"]) for u in usage[1:]] == [STEP2, (50, 5)]

    messages.append(lc_messages.HumanMessage("and again?"))
    assert step(llm, messages, stream=stream).content == "still 3"
    check_provider_side(proxy, fake_upstream)
    if stream:
        assert fake_upstream.bodies()[0]["stream_options"] == {"include_usage": True}
