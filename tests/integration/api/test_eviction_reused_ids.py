"""Eviction names each result by the call that produced it when a client reuses call ids.

Clients that number their calls ``call_0`` every turn (and recorded runs such as tau-bench's,
whose ids come back within a session) send several results under one id. Each result was
produced by the call in the assistant message just before it, so that call's function is
the one ``excludeTools`` is checked against and the placeholder names, not the function of
the newest call that reused the id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS
from tests.integration.transcripts import blob, sdk

LIMIT = 8000
PLACEHOLDER = "[context-cleared]"


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    context = {
        "eviction": {
            "atFraction": 0.5,
            "keepRecentRounds": 2,
            "clearAtLeast": 300,
            "minResultTokens": 100,
            "excludeTools": ["keep_me"],
        },
        "summarize": {"enabled": False},
    }
    models = {"default": {"contextLimit": LIMIT, "reservedOutput": 500}}
    return write_config(tmp_path / "agents.json", fake_upstream.url, models=models, context=context)


def test_a_reused_id_is_named_by_the_call_that_made_each_result(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    client = sdk(proxy, "reused")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find out why it fails."}]
    tools = ["keep_me", *["read_file"] * 9]
    for n, tool in enumerate(tools):
        fake_upstream.script(reply(None, tool_calls=[tool_call(tool, {"n": n}, id="call_0")]))
        out = client.chat.completions.create(model="gpt-4o", messages=messages, tools=CLIENT_TOOLS)
        messages.append(out.choices[0].message.model_dump(exclude_none=True))
        messages.append(
            {"role": "tool", "tool_call_id": "call_0", "content": blob(2000, f"{tool}-{n}")}
        )
    fake_upstream.script(reply("done"))
    client.chat.completions.create(model="gpt-4o", messages=messages, tools=CLIENT_TOOLS)

    prompt = fake_upstream.bodies()[-1]["messages"]
    results = [m for m in prompt if m["role"] == "tool"]
    placeholders = [m["content"] for m in results if m["content"].startswith(PLACEHOLDER)]
    assert placeholders, "the window never crossed atFraction"
    assert all(p.startswith(f"{PLACEHOLDER} Result of read_file (") for p in placeholders)
    assert results[0]["content"] == blob(2000, "keep_me-0"), "an excluded tool's result was cleared"
