"""Memory on two replicas of one database: a fact added, deleted or accepted through one is
in the other's next turn (no replica keeps facts of its own), the block stays byte-stable
through a turn whichever replica serves its steps, and two answers to one suggestion given
at once through both replicas leave one winner and a clear 400 for the other."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import CLIENT_KEY, Agent, stack
from tests.integration.api.memory_suggestions import suggest

CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


def _api(origin: str) -> httpx.Client:
    return httpx.Client(
        base_url=origin, headers={"authorization": f"Bearer {CLIENT_KEY}"}, timeout=10
    )


def _block(s: Any) -> str:
    return str(s.main_bodies()[-1]["messages"][0]["content"])


def test_memory_is_shared_and_stable_within_a_turn_across_replicas(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    memory = {"memoryPromotion": {"mode": "suggest"}}
    with (
        stack(tmp_path, db_dsn, fake_upstream, replicas=2, limit=32000, context=memory) as s,
        _api(s.servers[0].origin) as one,
        _api(s.servers[1].origin) as two,
    ):
        agent = Agent(s.client("mem-rep", 0))
        port = two.post("/v1/memory", json={"text": "The port is 8443"}).json()
        agent.say("which port?")
        first = _block(s)
        assert "- The port is 8443\n" in first

        # mid-turn: a fact added on replica 1, the tool step served by replica 1
        assert one.post("/v1/memory", json={"text": "The build uses uv"}).status_code == 201
        agent.messages[-1] = {"role": "assistant", "content": None, "tool_calls": [CALL]}
        agent.messages.append({"role": "tool", "tool_call_id": "call_1", "content": "a.txt"})
        agent.client = s.client("mem-rep", 1)
        agent.step()
        assert _block(s) == first

        # the next turn, back on replica 0, has it; a delete on replica 1 shows the turn after
        agent.client = s.client("mem-rep", 0)
        agent.say("and the build?")
        assert "- The port is 8443\n- The build uses uv\n" in _block(s)
        assert two.delete(f"/v1/memory/{port['id']}").status_code == 200
        agent.say("thanks")
        assert "8443" not in _block(s) and "- The build uses uv\n" in _block(s)

        # one suggestion answered through both replicas at once: one answer wins
        suggest(db_dsn, "mem-rep", "sug-race", ["The deploy target is eu-west-1"])
        answers: dict[str, httpx.Response] = {}
        threads = [
            threading.Thread(
                target=lambda c=c, a=a: answers.__setitem__(
                    a, c.post(f"/v1/memory/suggestions/sug-race/{a}")
                )
            )
            for c, a in ((one, "accept"), (two, "reject"))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(r.status_code for r in answers.values())
        assert codes == [200, 400], {a: r.text for a, r in answers.items()}
        loser = next(r for r in answers.values() if r.status_code == 400)
        assert "already" in loser.json()["error"]["message"], loser.text
        stored = [f["text"] for f in one.get("/v1/memory").json()["data"]]
        accepted = answers["accept"].status_code == 200
        assert ("The deploy target is eu-west-1" in stored) is accepted
        agent.say("where do we deploy?")
        assert ("eu-west-1" in _block(s)) is accepted
