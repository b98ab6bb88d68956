"""Issue #23: real smolagents agents through the proxy, the fake upstream playing the model.

smolagents (1.26) renders its memory the same way for both agents checked here: the model's
action goes back as assistant text and the tool's output as a user message
``"Observation:\\n…"``, never as ``role: tool``. ``ToolCallingAgent`` gets native tool calls
from the model; ``CodeAgent`` gets a text action (a ``<code>`` block it runs itself). Before
the observations stage, a 36,832-character observation went upstream in full on every later
step; here it is cut once it is not the latest message, frozen, and read back byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.settings import Settings
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.transcripts import api, read_all

smolagents = pytest.importorskip("smolagents")

LINE = "2026-11-30T12:00:00Z worker-{:04d} GET /api/v1/items 200 in 12ms\n"
LOG = "".join(LINE.format(i) for i in range(584)) + "x" * 40
assert len(LOG) == 36_832  # the size of the observation in the issue


def read_log(part: int) -> str:
    """Reads one part of the service log.

    Args:
        part: which part of the log to read
    """
    return LOG if part == 1 else f"part {part}: 3 failed requests"


READ_LOG = smolagents.tool(read_log)  # not as a decorator: smolagents warns of any other


@pytest.fixture
def proxy(db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream) -> Iterator[ProxyServer]:
    ctx = {"summarize": {"enabled": False}}
    path = write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)
    server = ProxyServer(Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3))
    yield server.start()
    server.stop()


def model(proxy: ProxyServer, sid: str) -> Any:
    return smolagents.OpenAIServerModel(
        model_id="gpt-4o", api_base=f"{proxy.origin}/s/{sid}/v1", api_key="sk-test-client"
    )


def text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content)
    return str(content or "")


def observations(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of every message of an upstream request that holds the big log's start."""
    return [
        (m["role"], text(m.get("content")))
        for m in body["messages"]
        if "worker-0000 " in text(m.get("content")) or "read_tool_output" in text(m.get("content"))
    ]


def handle(content: str) -> str:
    m = re.search(r"read_tool_output\((\{.*?\})\)", content)
    assert m is not None, content[:300]
    return str(json.loads(m.group(1))["id"])


def check_managed(proxy: ProxyServer, fake_upstream: FakeUpstream, sid: str, sent: str) -> None:
    """Step 2 sends the observation as smolagents wrote it (it is the latest message); step 3
    sends it cut, stored with a handle that reads back exactly what smolagents sent. The
    handle goes upstream only beside the agent's own tools (ToolCallingAgent's); CodeAgent
    sends none, and its cut observation says to re-run the action instead."""
    bodies = fake_upstream.bodies()
    assert len(bodies) == 3
    (role2, obs2), *_ = observations(bodies[1])
    assert role2 == "user" and obs2 == sent
    (role3, obs3), *_ = observations(bodies[2])
    assert role3 == "user" and obs3.startswith("Observation:")
    assert len(obs3) <= 24_000 < len(sent) and "[... truncated" in obs3
    assert not any(m["role"] == "tool" for m in bodies[2]["messages"])
    with api(proxy) as http:
        rows = http.get(f"/v1/sessions/{sid}/messages").json()["data"]
        (stored,) = [
            r["message"]["content"]
            for r in rows
            if "[... truncated" in text(r["message"].get("content"))
        ]
        assert read_all(http, sid, handle(stored)) == sent
    if bodies[2].get("tools"):
        assert obs3 == stored and "read_tool_output" in [
            t["function"]["name"] for t in bodies[2]["tools"]
        ]
    else:
        assert "read_tool_output" not in obs3 and "re-run the tool" in obs3


def test_tool_calling_agent_big_observation_is_cut_and_read_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply(None, tool_calls=[tool_call("read_log", {"part": 1}, id="call_1")]),
        reply(None, tool_calls=[tool_call("read_log", {"part": 2}, id="call_2")]),
        reply(None, tool_calls=[tool_call("final_answer", {"answer": "3"}, id="call_3")]),
    )
    agent = smolagents.ToolCallingAgent(
        tools=[READ_LOG], model=model(proxy, "smol-tc"), max_steps=4, verbosity_level=0
    )
    assert agent.run("How many requests failed?") == "3"
    check_managed(proxy, fake_upstream, "smol-tc", f"Observation:\n{LOG}")
    assert fake_upstream.bodies()[2]["tools"]  # the agent's own, so the handle went along


def test_code_agent_text_action_observation_is_cut_and_read_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(
        reply("Thought: read the log.\n<code>\nprint(read_log(part=1))\n</code>"),
        reply("Thought: and the next part.\n<code>\nprint(read_log(part=2))\n</code>"),
        reply("Thought: done.\n<code>\nfinal_answer('3')\n</code>"),
    )
    agent = smolagents.CodeAgent(
        tools=[READ_LOG], model=model(proxy, "smol-code"), max_steps=4, verbosity_level=0
    )
    assert agent.run("How many requests failed?") == "3"
    bodies = fake_upstream.bodies()
    (_, sent), *_ = observations(bodies[1])
    assert sent.startswith("Observation:\nExecution logs:\n2026-11-30T12:00:00Z worker-0000 ")
    check_managed(proxy, fake_upstream, "smol-code", sent)
    assert "tools" not in fake_upstream.bodies()[2]
