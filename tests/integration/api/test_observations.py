"""Issue #23: tool observations sent as user messages (smolagents' ToolCallingAgent and
text-action agents) are managed like tool results through the proxy: rewritten at ingest
once they are no longer the latest message, evicted with their action as a round, and read
back byte for byte by their ``obs_`` handle."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.transcripts import api, read_all, sdk

SYSTEM = (
    "You are an expert assistant who can solve any task using tool calls. To do so, you "
    "have been given access to some tools.\nThe tool call you write is an action: after "
    'the tool is executed, you will get the result of the tool call as an "observation".'
)
# Shaped as smolagents' ToolCallingAgent writes its memory to messages: the action as the
# assistant's text, the result as a user message "Observation:\n…".
BIG = "Observation:\n" + "".join(
    f"{i:05d} GET /api/v1/items/{i * 7919 % 10007} 200\n" for i in range(1500)
)
LOG = "Observation:\n" + "pip: Requirement already satisfied\n" * 400 + "Successfully built\n"


# ToolCallingAgent sends its tools with every request (CodeAgent sends none:
# test_smolagents.py, test_read_tool_output_toolless.py).
TOOLS = [
    {
        "type": "function",
        "function": {"name": "read_log", "parameters": {"type": "object", "properties": {}}},
    }
]


def action(i: int, tool: str) -> dict[str, Any]:
    call = {"name": tool, "arguments": {"i": i}}
    return {"role": "assistant", "content": f"Calling tools:\n[{json.dumps(call)}]"}


def transcript(observations: list[str]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "New task:\nHow many requests failed?"},
    ]
    for i, obs in enumerate(observations):
        msgs += [action(i, "read_log"), {"role": "user", "content": obs}]
    return msgs


@pytest.fixture
def proxy(db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream) -> Iterator[ProxyServer]:
    ctx = {
        "toolOutput": {"maxChars": 4000},
        "eviction": {"enabled": False},
        "summarize": {"enabled": False},
    }
    path = write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)
    server = ProxyServer(Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3))
    yield server.start()
    server.stop()


def handle(content: str) -> dict[str, Any]:
    m = re.search(r"read_tool_output\((\{.*?\})\)", content)
    assert m is not None, content[:300]
    return dict(json.loads(m.group(1)))


def test_observations_are_cut_compacted_and_read_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    client = sdk(proxy, "smol")
    client.chat.completions.create(model="gpt-4o", messages=transcript([BIG]), tools=TOOLS)
    first = fake_upstream.bodies()[-1]["messages"]
    assert first[3]["content"] == BIG  # the latest observation goes as sent
    steps = [BIG, LOG, "Observation:\n3 failed"]
    for n in (2, 3):
        client.chat.completions.create(model="gpt-4o", messages=transcript(steps[:n]), tools=TOOLS)
    bodies = fake_upstream.bodies()
    sent = bodies[-1]["messages"]
    cut, compacted = sent[3]["content"], sent[5]["content"]
    assert len(cut) <= 4000 and cut.startswith("Observation:\n00000")
    assert "offset" in handle(cut) and handle(cut)["id"].startswith("obs_")
    assert compacted.startswith("Observation:\n[compacted losslessly")
    assert "[previous line repeated 399 more times]" in compacted
    assert sent[7]["content"] == "Observation:\n3 failed"
    assert bodies[-2]["messages"][3]["content"] == cut  # frozen once rewritten
    assert "read_tool_output" in [t["function"]["name"] for t in bodies[-1].get("tools") or []]
    with api(proxy) as http:
        assert read_all(http, "smol", handle(cut)["id"]) == BIG
        assert read_all(http, "smol", handle(compacted)["id"]) == LOG


def test_old_observation_rounds_are_evicted(
    db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    ctx = {
        "eviction": {
            "atFraction": 0.05,
            "keepRecentRounds": 1,
            "clearAtLeast": 500,
            "minResultTokens": 100,
        },
        "toolOutput": {"compact": False},
        "summarize": {"enabled": False},
    }
    path = write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)
    server = ProxyServer(Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3))
    server.start()
    try:
        dumps = [
            f"Observation:\n{json.dumps([{'row': i, 'tag': t} for i in range(1000)])}"
            for t in "abc"
        ]
        sdk(server, "smol2").chat.completions.create(
            model="gpt-4o", messages=transcript([*dumps, "Observation:\nok"]), tools=TOOLS
        )
        body = fake_upstream.bodies()[-1]
        sent = body["messages"]
        cleared = [m for m in sent if m["content"].startswith("[context-cleared]")]
        assert len(cleared) == 3 and all(m["role"] == "user" for m in cleared)
        assert sent[-1]["content"] == "Observation:\nok"
        # The placeholders are the prompt's only handles: the tool they name goes with them.
        assert [t["function"]["name"] for t in body["tools"]] == ["read_log", "read_tool_output"]
        with api(server) as http:
            for m, original in zip(cleared, dumps, strict=True):
                assert read_all(http, "smol2", handle(m["content"])["id"]) == original
    finally:
        server.stop()


def test_a_latest_observation_too_large_for_the_window_is_cut_not_refused(
    db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    """A text-action agent cannot shorten the output its tool gave: refusing the request
    would end its run, where the same output as a tool result is cut at ingestion."""
    ctx = {"toolOutput": {"maxChars": 4000}, "eviction": {"enabled": False}}
    models = {"default": {"contextLimit": 8000, "reservedOutput": 1000}}
    path = write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx, models=models)
    server = ProxyServer(Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3))
    server.start()
    try:
        huge = BIG + BIG.removeprefix("Observation:\n") * 2  # about 17,000 tokens
        client = sdk(server, "smol3")
        client.chat.completions.create(model="gpt-4o", messages=transcript([huge]), tools=TOOLS)
        cut = fake_upstream.bodies()[-1]["messages"][-1]["content"]
        assert len(cut) <= 4000 and cut.startswith("Observation:\n00000")
        steps = [huge, "Observation:\n3 failed"]
        client.chat.completions.create(model="gpt-4o", messages=transcript(steps), tools=TOOLS)
        assert fake_upstream.bodies()[-1]["messages"][3]["content"] == cut  # frozen
        with api(server) as http:
            assert read_all(http, "smol3", handle(cut)["id"]) == huge
            rows = http.get("/v1/sessions/smol3/messages", params={"form": "sent"}).json()
            assert rows["data"][3]["message"]["content"] == huge
    finally:
        server.stop()
