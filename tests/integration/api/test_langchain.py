"""LangChain's ChatOpenAI (langchain-openai) through the proxy: ``bind_tools``, ``invoke``,
``stream`` and ``astream`` with ``stream_usage``, a tool loop whose first output the proxy cuts
and whose model reads it back in a step that also calls the client's tool
(tests/integration/api/frameworks.py). LangChain resends the whole history each step, without
a session id."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from tests.fakes.replies import context_length_exceeded, reply, tool_call
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


async def step(llm: Any, messages: list[Any], *, how: str) -> Any:
    if how == "invoke":
        return llm.invoke(messages)
    if how == "stream":
        chunks = list(llm.stream(messages))
    else:
        chunks = [chunk async for chunk in llm.astream(messages)]
    assert len({c.id for c in chunks}) == 1, "one message per step, across the proxy's rounds"
    message = chunks[0]
    for chunk in chunks[1:]:
        message = message + chunk
    return message


async def run(llm: Any, messages: list[Any], *, how: str) -> list[Any]:
    """The agent loop: step until the model answers without a tool call, then a next turn."""
    replies = []
    while True:
        ai = await step(llm, messages, how=how)
        replies.append(ai)
        messages.append(ai)
        if not ai.tool_calls:
            break
        messages.extend(read_log.invoke(call) for call in ai.tool_calls)
    messages.append(lc_messages.HumanMessage("and again?"))
    replies.append(await step(llm, messages, how=how))
    return replies


@pytest.mark.parametrize("how", ["invoke", "stream", "astream"])
def test_tool_loop_with_a_cut_output_read_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream, how: str
) -> None:
    script(fake_upstream)
    llm = lc_openai.ChatOpenAI(
        model="gpt-4o", base_url=proxy.url, api_key="sk-test-client", stream_usage=True
    ).bind_tools([read_log])
    messages: list[Any] = [
        lc_messages.SystemMessage(SYSTEM),
        lc_messages.HumanMessage("How many requests failed?"),
    ]
    *replies, second = asyncio.run(run(llm, messages, how=how))

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
    assert second.content == "still 3"
    check_provider_side(proxy, fake_upstream)
    if how != "invoke":
        assert fake_upstream.bodies()[0]["stream_options"] == {"include_usage": True}


def test_a_context_overflow_in_the_proxys_round_is_the_providers_400(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The provider refuses the prompt with the page read back: nothing had reached LangChain,
    so it raises the 400's class with the provider's ``code``, as for any request, rather
    than a bare ``APIError`` from inside the stream."""
    fake_upstream.script(
        reply(None, tool_calls=[tool_call("read_log", '{"part": 1}', id="call_1")]),
        reply(None, tool_calls=[tool_call("read_tool_output", {"id": "call_1"}, id="int_1")]),
        context_length_exceeded(),
    )
    llm = lc_openai.ChatOpenAI(model="gpt-4o", base_url=proxy.url, api_key="sk-test-client")
    llm = llm.bind_tools([read_log])
    messages: list[Any] = [lc_messages.HumanMessage("How many requests failed?")]
    ai = llm.invoke(messages)
    messages += [ai, *(read_log.invoke(call) for call in ai.tool_calls)]
    with pytest.raises(openai.BadRequestError) as info:
        list(llm.stream(messages))
    assert info.value.status_code == 400 and info.value.code == "context_length_exceeded"
