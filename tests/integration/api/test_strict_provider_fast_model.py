"""The proxy's own calls to a fast model that is one of OpenAI's reasoning models (o4-mini,
gpt-5-mini; also the agent's own model when ``fastModel`` is unset) pass the strict
provider's checks, which refuse ``max_tokens`` and a ``temperature`` of 0 for those models as
OpenAI does (and, for o1-mini, any system message): the summary is written and memory
promotion's extraction is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.services.fastmodel import REASONING_ROOM, for_model
from proxy.settings import Settings
from tests.fakes.strict_openai import violations
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, wait_until
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.transcripts import sdk


@pytest.mark.parametrize("fast", ["o4-mini", "gpt-5-mini", "o1-mini"])
def test_a_reasoning_fast_model_gets_requests_it_takes(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, fast: str
) -> None:
    fake_upstream.validator = violations
    fake_upstream.default = Model(fast=(fast,))
    path = write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        agents={"default": {"provider": "openai", "fastModel": fast}},
        models={
            "default": {"contextLimit": 4000, "reservedOutput": 500},
            fast: {"contextLimit": 32000},
        },
        context={
            "summarize": {"softFraction": 0.5, "keepRecent": 2},
            "eviction": {"enabled": False},
            "memoryPromotion": {"mode": "auto"},
        },
    )
    server = ProxyServer(Settings(database_url=db_dsn, config=path, watch_config=False)).start()
    try:
        agent = Agent(sdk(server, "reasoning"), model="gpt-4o")
        agent.fill(5)
        wait_until(
            lambda: sum(b.get("model") == fast for b in fake_upstream.bodies()) >= 2,
            timeout=10,
            what="the summary and the extraction",
        )
    finally:
        server.stop()
    assert fake_upstream.violations == [], fake_upstream.violations[:2]


def test_other_models_get_the_bound_and_temperature_as_written() -> None:
    body = {"model": "m", "messages": [], "max_tokens": 2000, "temperature": 0}
    for model in ("gpt-4o-mini", "gpt-5-chat-latest", "llama3.1:8b", "omni-7b", "fast-model"):
        assert for_model(model, body) is body
    for model in ("o3", "o4-mini", "gpt-5", "gpt-5.1-mini", "openai/o1"):
        assert for_model(model, body) == {
            "model": "m",
            "messages": [],
            "max_completion_tokens": 2000 + REASONING_ROOM,
        }
