"""An optional block the proxy adds never costs a request that fits without it.

The agent's model is :class:`~tests.integration.api.strict_provider.StrictProvider` (a real
BPE, 400 ``context_length_exceeded`` over its window). A full ``<memory>`` block on top of a
current message that alone fits: the overflow guard leaves the block out, as its last
resort, rather than refuse the request.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import CLIENT_KEY, Agent, Model, stack, words
from tests.integration.api.strict_provider import StrictProvider

LIMIT, RESERVED = 4000, 500


def test_a_full_memory_block_is_left_out_rather_than_the_request_refused(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    provider = StrictProvider(LIMIT)
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        Model(main=provider),
        limit=LIMIT,
        reserved=RESERVED,
        summarize={"enabled": False},
        context={"memoryPromotion": {"mode": "suggest"}},
        settings={"tokenizer": ""},
    ) as s:
        auth = {"authorization": f"Bearer {CLIENT_KEY}"}
        for i in range(60):  # far past the block's cap, a quarter of the prompt budget
            fact = f"Service {i} listens on port {8000 + i}; its config is /etc/svc/{i}.toml"
            r = httpx.post(f"{s.proxy.origin}/v1/memory", json={"text": fact}, headers=auth)
            assert r.status_code == 201, r.text
        agent = Agent(s.client("full-memory"))
        assert agent.say(words(2800, "big"), max_tokens=RESERVED) == "ok"
        (sent,) = s.main_bodies()
        assert "<memory>" not in str(sent["messages"])
        assert sent["messages"] == agent.messages[:-1], "what the client sent, unchanged"
        assert provider.refused == []
        (trimmed,) = s.events("full-memory", "context.trimmed")
        assert trimmed["dropped_blocks"] == ["memory"]
