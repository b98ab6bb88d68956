"""The OpenAI Agents SDK (openai-agents) through the proxy on chat completions
(``OpenAIChatCompletionsModel``, not the Responses API), with a function tool, run with
``Runner.run`` and ``Runner.run_streamed``; the script is tests/integration/api/frameworks.py's.
The SDK resends the run's items as chat messages each step and ``to_input_list()`` carries
them into the next run, without a session id.

Streamed, the SDK asks for usage only from api.openai.com: anywhere else it sends no
``stream_options`` and reports 0 tokens unless ``ModelSettings(include_usage=True)`` (README,
Clients), which these runs set."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fakes.replies import rate_limited, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, replied
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
from tests.integration.transcripts import api

agents = pytest.importorskip("agents")

__all__ = ["proxy"]


@agents.function_tool
def read_log(part: int) -> str:
    """Reads one part of the service log.

    Args:
        part: which part of the log to read
    """
    return read_log_text(part)


async def run(agent: Any, given: Any, *, stream: bool) -> Any:
    if not stream:
        return await agents.Runner.run(agent, given)
    result = agents.Runner.run_streamed(agent, given)
    async for _ in result.stream_events():
        pass
    return result


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
def test_agent_run_with_a_cut_output_read_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    agents.set_tracing_disabled(True)
    script(fake_upstream)
    client = agents.AsyncOpenAI(base_url=proxy.url, api_key="sk-test-client", max_retries=0)
    agent = agents.Agent(
        name="logs",
        instructions=SYSTEM,
        model=agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client),
        model_settings=agents.ModelSettings(include_usage=True, parallel_tool_calls=True),
        tools=[read_log],
    )

    async def both() -> tuple[Any, Any]:
        first = await run(agent, "How many requests failed?", stream=stream)
        more = [*first.to_input_list(), {"role": "user", "content": "and again?"}]
        return first, await run(agent, more, stream=stream)

    first, second = asyncio.run(both())
    assert (first.final_output, second.final_output) == ("3 failed", "still 3")
    calls = [i.raw_item for i in first.new_items if i.type == "tool_call_item"]
    no_internal_call([c.name for c in calls])
    assert [(c.call_id, c.arguments) for c in calls] == [
        ("call_1", '{"part": 1}'),
        ("call_2", '{"part": 2}'),
    ]
    outputs = [i.output for i in first.new_items if i.type == "tool_call_output_item"]
    assert outputs[1] == PART2
    usage = [(r.usage.input_tokens, r.usage.output_tokens) for r in first.raw_responses]
    assert usage[1:] == [STEP2, (50, 5)]
    check_provider_side(proxy, fake_upstream)
    assert all(b.get("parallel_tool_calls") is True for b in fake_upstream.bodies())


def test_a_handoff_gives_each_agent_its_own_derived_session(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """After a handoff the SDK sends the whole history under the new agent's instructions:
    the derived id hashes the system message, so each agent's requests reconcile into a
    session of its own, each only ever appended to. One id named for the whole run would
    have every switch supersede the other agent's history (README, Agent frameworks)."""
    agents.set_tracing_disabled(True)
    fake_upstream.script(
        reply(None, tool_calls=[tool_call("transfer_to_logs", "{}", id="call_h")]),
        reply(None, tool_calls=[tool_call("read_log", '{"part": 1}', id="call_1")]),
        reply("3 failed"),
        reply("triaged"),
    )
    client = agents.AsyncOpenAI(base_url=proxy.url, api_key="sk-test-client", max_retries=0)
    model = agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
    logs = agents.Agent(name="logs", instructions=SYSTEM, model=model, tools=[read_log])
    triage = agents.Agent(name="triage", instructions="You triage.", model=model, handoffs=[logs])

    async def both() -> tuple[Any, Any]:
        first = await agents.Runner.run(triage, "How many requests failed?")
        more = [*first.to_input_list(), {"role": "user", "content": "and now?"}]
        return first, await agents.Runner.run(triage, more)

    first, second = asyncio.run(both())
    assert (first.last_agent.name, first.final_output, second.final_output) == (
        "logs",
        "3 failed",
        "triaged",
    )
    systems = [b["messages"][0]["content"] for b in fake_upstream.bodies()]
    assert systems == ["You triage.", SYSTEM, SYSTEM, "You triage."]
    with api(proxy) as http:
        ids = [s["id"] for s in http.get("/v1/sessions").json()["data"]]
        for sid in ids:  # each agent's last reply is stored just after its answer
            replied(http, sid)
        views = [http.get(f"/v1/sessions/{sid}").json() for sid in ids]
    assert len(views) == 2 and all(v["id"].startswith("auto-") for v in views)
    assert [v["superseded_count"] for v in views] == [0, 0]
    assert sorted(v["message_count"] for v in views) == [7, 9]


def test_a_streamed_run_retries_a_429_in_the_proxys_round(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The provider limits the round the proxy makes to answer ``read_tool_output``: nothing
    had reached the SDK, so it gets the 429 and its client retries the step, which goes on
    as if nothing happened (an in-band error ended the run)."""
    agents.set_tracing_disabled(True)
    read = tool_call("read_tool_output", {"id": "call_1", "limit": 100}, id="int_1")
    fake_upstream.script(
        reply(None, tool_calls=[tool_call("read_log", '{"part": 1}', id="call_1")]),
        reply(None, tool_calls=[read]),
        rate_limited(0),
        reply(None, tool_calls=[read]),
        reply("3 failed"),
    )
    client = agents.AsyncOpenAI(base_url=proxy.url, api_key="sk-test-client", max_retries=1)
    agent = agents.Agent(
        name="logs",
        instructions=SYSTEM,
        model=agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client),
        tools=[read_log],
    )
    result = asyncio.run(run(agent, "How many requests failed?", stream=True))
    assert result.final_output == "3 failed"
    assert len(fake_upstream.bodies()) == 5
    with api(proxy) as http:
        (session,) = http.get("/v1/sessions").json()["data"]
        view = http.get(f"/v1/sessions/{session['id']}").json()
    assert view["superseded_count"] == 0
