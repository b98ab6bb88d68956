"""A real recorded agent run replayed step by step through the proxy with every stage on
(truncation, eviction, summaries, recitation, a full ``<memory>`` block, retrieval with every
hit let through) at a small window: every request the provider gets fits it, counted as
OpenAI counts, and the injected blocks keep to their share of the prompt budget."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Model,
    Stack,
    briefing,
    stack,
    wait_until,
)
from tests.integration.api.strict_provider import StrictProvider, bpe_tokens
from tests.integration.transcripts import load_transcript

LIMIT, RESERVED = 8000, 500
SHARE = (LIMIT - RESERVED) // 4
CONTEXT = {
    "eviction": {"enabled": True},
    "recitation": {"enabled": True},
    "memoryPromotion": {"mode": "suggest"},
    "retrieval": {"enabled": True, "timeoutMs": 1000, "minScore": -1.0, "maxResults": 8},
}
_BLOCK = re.compile(r"<(memory|related_context)>.*?</\1>", re.S)


def _texts(body: dict[str, Any]) -> list[str]:
    out = []
    for m in body["messages"]:
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [p.get("text") or "" for p in content if isinstance(p, dict)]
    return out


def _embedded(s: Stack) -> int:
    """How many of the session's messages the background embedder has embedded."""
    rows = s.query(
        "SELECT count(*) AS n FROM message_embeddings WHERE session_id = 'replay'"
        " AND embedding IS NOT NULL"
    )
    return int(rows[0]["n"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "SWE-agent__mini-swe-agent__django__django-11910.traj.json",
        "OpenHands__benchmarks__traj_safety-metrics.json",
    ],
)
def test_a_real_run_with_every_stage_on_fits_the_window(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, name: str
) -> None:
    messages: list[dict[str, Any]] = []  # a person checks in every few steps: a new turn
    for m in load_transcript(30, name):
        steps = sum(x["role"] == "assistant" for x in messages)
        if m["role"] == "assistant" and messages[-1]["role"] == "tool" and steps % 4 == 0:
            messages.append({"role": "user", "content": "Keep going: the migration?"})
        messages.append(m)
    provider = StrictProvider(LIMIT)
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        Model(main=provider, brief=lambda req: briefing("- django/db/models/query.py")),
        limit=LIMIT,
        reserved=RESERVED,
        summarize={"softFraction": 0.5, "keepRecent": 4},
        context=CONTEXT,
        settings={"embedding_poll_seconds": 0.05},
    ) as s:
        with httpx.Client(
            base_url=s.proxy.origin, headers={"authorization": f"Bearer {CLIENT_KEY}"}, timeout=20
        ) as http:
            for i in range(120):  # far more facts than the block holds
                text = f"Fact {i}: the module django/app{i}/models.py defines model M{i}."
                assert http.post("/v1/memory", json={"text": text}).status_code == 201
            ends = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
            for end in ends[1:]:
                r = http.post(
                    "/v1/chat/completions",
                    headers={"x-session-id": "replay"},
                    json={"model": "gpt-fake", "messages": messages[:end], "max_tokens": RESERVED},
                )
                assert r.status_code == 200, r.text
                s.replied("replay")
                wait_until(lambda e=end: _embedded(s) >= e - 2, timeout=20, what="embeddings")
        names = {e["name"] for e in s.events("replay")}
    assert provider.refused == []
    assert {"context.retrieval", "context.compaction.completed"} <= names, names
    blocks = {"memory": 0, "related_context": 0}
    for body in s.main_bodies():
        for text in _texts(body):
            for m in _BLOCK.finditer(text):
                tokens = bpe_tokens(m.group(0))
                blocks[m.group(1)] = max(blocks[m.group(1)], tokens)
                assert tokens <= SHARE * 1.25, (m.group(1), tokens)
    assert blocks["memory"] > 0 and blocks["related_context"] > 0, blocks
