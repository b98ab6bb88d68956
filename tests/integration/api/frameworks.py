"""What the agent-framework tests share (test_langchain.py, test_openai_agents.py,
test_pydantic_ai.py): a model script with a big tool output that the proxy cuts, a step where
the model reads it back with ``read_tool_output`` beside a call of the client's own, and the
checks of what the framework and the provider saw."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.settings import Settings
from tests.fakes.replies import Reply, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, replied, write_config
from tests.integration.transcripts import api

LOG = "".join(f"2026-11-30T12:00:00Z worker-{i:04d} GET /api/v1/items 200\n" for i in range(600))
PART2 = "part 2: 3 failed requests"
MAX_CHARS = 4000
STEP2 = (40, 4)  # the usage of the step the proxy answered a call in: its last round's
SYSTEM = "You read logs."


def read_log_text(part: int) -> str:
    return LOG if part == 1 else PART2


def script(fake_upstream: FakeUpstream, *, compact: bool = False) -> None:
    """Step 1 calls ``read_log(1)``, whose output the proxy cuts on its way in; step 2 reads
    it back (the proxy answers that call in a round of its own, inside the same request) and
    then calls ``read_tool_output`` again beside ``read_log(2)``, of which the client gets
    only its own; step 3 answers; a second turn answers again. ``compact`` writes the
    arguments as OpenAI's models do, with no spaces."""

    def args(part: int) -> str:
        return f'{{"part":{part}}}' if compact else f'{{"part": {part}}}'

    read = tool_call("read_tool_output", {"id": "call_1", "grep": "worker-0007"}, id="int_1")
    again = tool_call("read_tool_output", {"id": "call_1", "limit": 100}, id="int_2")
    steps: list[Reply] = [
        reply(None, tool_calls=[tool_call("read_log", args(1), id="call_1")]),
        reply(None, tool_calls=[read]),
        reply(None, tool_calls=[again, tool_call("read_log", args(2), id="call_2")], usage=STEP2),
        reply("3 failed", usage=(50, 5)),
        reply("still 3", usage=(60, 6)),
    ]
    fake_upstream.script(*steps)


@pytest.fixture
def proxy(db_dsn: str, tmp_path: Path, fake_upstream: FakeUpstream) -> Iterator[ProxyServer]:
    ctx = {"summarize": {"enabled": False}, "toolOutput": {"maxChars": MAX_CHARS}}
    path = write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)
    server = ProxyServer(Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3))
    yield server.start()
    server.stop()


def check_provider_side(proxy: ProxyServer, fake_upstream: FakeUpstream) -> None:
    """Five provider calls: the proxy's own round (the page read back) within step 2, whose
    second call of the proxy's tool is neither answered nor kept;
    the big output cut in every request; the client's history reconciled into one derived
    session with nothing superseded, so no framework resend made the proxy rewrite it."""
    bodies = fake_upstream.bodies()
    assert len(bodies) == 5
    page = bodies[2]["messages"][-1]
    assert page["role"] == "tool" and page["tool_call_id"] == "int_1"
    assert "worker-0007" in page["content"]
    assert not any("int_2" in str(m) for body in bodies[3:] for m in body["messages"])
    for body in bodies[1:]:
        (output,) = [m for m in body["messages"] if m.get("tool_call_id") == "call_1"]
        assert len(output["content"]) < MAX_CHARS + 400 < len(LOG)
        assert "read_tool_output" in output["content"]
    assert bodies[4]["messages"][-1] == {"role": "user", "content": "and again?"}
    with api(proxy) as http:
        (session,) = http.get("/v1/sessions").json()["data"]
        assert session["id"].startswith("auto-")
        replied(http, session["id"])  # the last reply is stored just after its answer
        view = http.get(f"/v1/sessions/{session['id']}").json()
    assert view["superseded_count"] == 0
    assert view["message_count"] == 9


def no_internal_call(names: list[str]) -> None:
    assert names == ["read_log", "read_log"], names
