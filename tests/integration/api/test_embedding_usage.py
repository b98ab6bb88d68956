"""The tokens of embedding calls a provider answers are counted in ``gen_ai_client_token_usage``
(operation ``embeddings``), as its usage reports them: the ``/v1/embeddings`` passthrough's,
and retrieval's provider embedder's, a new turn's query (in the request) and the background
batches (outside any request) alike. The builtin embedder makes no provider call and counts
nothing (README: Metrics)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.fakes.replies import reply
from tests.fakes.upstream import EMBEDDINGS, FakeUpstream
from tests.integration.api.compaction_stack import wait_until
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_events import chat, user
from tests.integration.api.test_metrics import Samples, scrape
from tests.integration.api.test_retrieval import _config_text

HEADERS = {"authorization": "Bearer sk-test-client"}
EMBEDDING = {"gen_ai_operation_name": "embeddings", "gen_ai_token_type": "input"}


def _reported(fake: FakeUpstream) -> int:
    """The prompt tokens the fake provider's embedding answers reported (its rule: a
    quarter of each input's characters)."""
    total = 0
    for body in fake.bodies(EMBEDDINGS):
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        total += sum(len(text) // 4 for text in inputs)
    return total


def _counted(m: Samples, model: str) -> float:
    found = [
        s.value
        for s in m.samples
        if s.name == "gen_ai_client_token_usage_sum"
        and s.labels.get("gen_ai_request_model") == model
        and all(s.labels.get(k) == v for k, v in EMBEDDING.items())
    ]
    return float(sum(found))


def test_the_embeddings_passthrough_counts_the_tokens_the_provider_reports(
    proxy: ProxyServer,
) -> None:
    text = "forty characters of text to be embedded."
    body = {"model": "emb-1", "input": [text, text + text]}
    resp = httpx.post(f"{proxy.origin}/v1/embeddings", json=body, headers=HEADERS, timeout=10)
    assert resp.status_code == 200
    assert resp.json()["usage"]["prompt_tokens"] == 30
    m = scrape(proxy.origin)
    labels = {"gen_ai_request_model": "emb-1", **EMBEDDING}
    assert m.value("gen_ai_client_token_usage_sum", **labels) == 30
    assert m.value("gen_ai_client_token_usage_count", **labels) == 1


@pytest.fixture
def embedding_proxy(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> Iterator[ProxyServer]:
    path = tmp_path / "agents.json"
    raw: dict[str, Any] = json.loads(_config_text(path, fake_upstream.url))
    raw["embedding"] = {"provider": "openai", "model": "text-embedding-fake"}
    path.write_text(json.dumps(raw))
    server = ProxyServer(Settings(database_url=db_dsn, config=path)).start()
    yield server
    server.stop()


def test_retrievals_provider_embedder_counts_its_queries_and_background_batches(
    embedding_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.default = reply("noted, the port is 8443 as you said")
    history: list[Any] = []
    for question in ("the API server listens on port 8443", "which port was that again?"):
        history.append(user(question))
        history.append(chat(embedding_proxy.origin, "emb-usage", history))
    # the stored messages are embedded in the background, after their requests ended
    wait_until(lambda: len(fake_upstream.bodies(EMBEDDINGS)) >= 3, timeout=20, what="batches")
    wait_until(
        lambda: (
            _counted(scrape(embedding_proxy.origin), "text-embedding-fake")
            == _reported(fake_upstream)
            > 0
        ),
        timeout=20,
        what="every embedding call's tokens counted",
    )
