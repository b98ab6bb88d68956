"""pydantic-ai's chat-completions model (``OpenAIChatModel``) through the proxy, the script
tests/integration/api/frameworks.py's. Not in the test extra (its slim install is larger than
the others together): the test is skipped without it (README, Clients).

pydantic-ai parses a tool call's arguments and writes them again with no spaces when it resends
the history, so the model's own spacing (``{"part": 1}``) comes back as ``{"part":1}``: a
different message, which supersedes the stored reply once per tool step (README, "Stored
reply"). OpenAI's models write arguments with no spaces, as the script does here, and then
nothing is superseded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.frameworks import (
    STEP2,
    SYSTEM,
    check_provider_side,
    no_internal_call,
    proxy,
    read_log_text,
    script,
)

pydantic_ai = pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim[openai] not installed")
pai_openai = pytest.importorskip("pydantic_ai.models.openai")
pai_providers = pytest.importorskip("pydantic_ai.providers.openai")

__all__ = ["proxy"]


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_stream"])
def test_agent_run_with_a_cut_output_read_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    script(fake_upstream, compact=True)
    provider = pai_providers.OpenAIProvider(base_url=proxy.url, api_key="sk-test-client")
    model = pai_openai.OpenAIChatModel("gpt-4o", provider=provider)
    agent = pydantic_ai.Agent(model, system_prompt=SYSTEM)

    @agent.tool_plain
    def read_log(part: int) -> str:
        """Reads one part of the service log."""
        return read_log_text(part)

    async def both() -> tuple[Any, list[Any], Any]:
        if stream:
            async with agent.run_stream("How many requests failed?") as result:
                output = await result.get_output()
                history = result.all_messages()
        else:
            done = await agent.run("How many requests failed?")
            output, history = done.output, done.all_messages()
        return output, history, await agent.run("and again?", message_history=history)

    output, history, second = asyncio.run(both())
    assert (output, second.output) == ("3 failed", "still 3")
    calls = [p for m in history for p in m.parts if p.part_kind == "tool-call"]
    no_internal_call([c.tool_name for c in calls])
    assert [c.tool_call_id for c in calls] == ["call_1", "call_2"]
    responses = [m for m in history if m.kind == "response"]
    usage = [(r.usage.input_tokens, r.usage.output_tokens) for r in responses]
    assert usage[1] == STEP2
    check_provider_side(proxy, fake_upstream)
