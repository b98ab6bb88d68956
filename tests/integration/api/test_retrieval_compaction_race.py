"""Retrieval never brings back a message the prompt still carries, even when a compaction
lands while the turn's search runs.

The turn that crosses ``softFraction`` starts a compaction in the background and searches
for related messages (a new user message begins a turn). The search reads the latest
summary's boundary when it runs; the step's prompt is built on the window it read before.
A compaction that lands in between (here: the fast model answers at once, the query's
embedding takes a while) made the search call the folded messages "summarised" and splice
them into the prompt, which still held each of them verbatim.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import openai

from proxy.settings import Settings
from tests.fakes.rendering import _embeddings_json
from tests.fakes.replies import RecordedRequest
from tests.fakes.upstream import EMBEDDINGS, FakeUpstream
from tests.integration.api.compaction_stack import FAST, Agent, Model, wait_until, words
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.conftest import column

SID = "race"


def slow_embedding(req: RecordedRequest) -> Any:
    """The fake's vectors, after 0.15 s (the turn waits up to ``timeoutMs``, 300 ms)."""
    return dataclasses.replace(_embeddings_json(req.json, 8), first_byte_delay=0.15)


def test_a_compaction_landing_during_the_search_brings_back_nothing_the_prompt_holds(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    context = {
        "summarize": {"softFraction": 0.5, "hardFraction": 0.95, "keepRecent": 2},
        "eviction": {"enabled": False},
        "retrieval": {"enabled": True, "minScore": -1.0, "maxResults": 4},
    }
    models = {
        "default": {"contextLimit": 4000, "reservedOutput": 500},
        FAST: {"contextLimit": 32000},
    }
    path = write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        models=models,
        context=context,
        embedding={"provider": "openai", "model": "text-embedding-fake"},
    )
    fake_upstream.default = Model()
    settings = Settings(database_url=db_dsn, config=path, embedding_poll_seconds=0.05)
    server = ProxyServer(settings).start()
    try:
        client = openai.OpenAI(
            base_url=f"{server.origin}/s/{SID}/v1", api_key="sk-test-client", max_retries=0
        )
        agent = Agent(client)
        for i in range(3):  # under softFraction (2000 tokens)
            agent.say(words(550, f"t{i}"))
        stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = $1", SID)[0]
        embedded = (
            "SELECT count(*) FROM message_embeddings WHERE session_id = $1"
            " AND embedding IS NOT NULL"
        )
        wait_until(lambda: column(db_dsn, embedded, SID)[0] >= stored - 1, 10, "embeddings")
        fake_upstream.script(*[slow_embedding] * 20, endpoint=EMBEDDINGS)
        agent.say(words(550, "t3"))  # crosses softFraction: compaction and search at once
        wait_until(lambda: column(db_dsn, "SELECT count(*) FROM summaries")[0], what="summary")
    finally:
        server.stop()

    prompt = [b for b in fake_upstream.bodies() if b.get("model") != FAST][-1]["messages"]
    assert not any("<conversation_summary>" in str(m["content"]) for m in prompt)
    related = [m for m in prompt if "<related_context>" in str(m["content"])]
    shown = json.dumps(related)
    assert "summarised" not in shown, "a message the prompt holds came back as summarised"
