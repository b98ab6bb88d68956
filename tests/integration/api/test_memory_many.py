"""A tenant with thousands of facts: the list pages through all of them once each, a turn's
first request reads only what its ``<memory>`` block can use, and concurrent accepts of
suggestions that share facts store each fact once, every suggestion answered once."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from proxy.cascade.memory import fact_key
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config
from tests.integration.api.memory_suggestions import CLIENT_TENANT, suggest
from tests.integration.conftest import execute, run_sync

MANY = 5000


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        context={"memoryPromotion": {"mode": "suggest"}},
    )


def _store_many(dsn: str) -> list[str]:
    texts = [f"Service {i} listens on port {10000 + i}." for i in range(MANY)]
    values = ", ".join(f"('{CLIENT_TENANT}', 'global', '{t}', '{fact_key(t)}')" for t in texts)
    run_sync(execute(dsn, f"INSERT INTO memory (tenant, scope, fact, fact_key) VALUES {values}"))
    return texts


@pytest.mark.heavy  # times a request against a bar
def test_thousands_of_facts_page_and_inject(
    http: httpx.Client, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    texts = _store_many(db_dsn)
    seen: list[str] = []
    for offset in range(0, MANY + 1000, 1000):
        page = http.get("/v1/memory", params={"limit": 1000, "offset": offset})
        assert page.status_code == 200, page.text
        seen += [f["text"] for f in page.json()["data"]]
    assert seen == texts

    started = time.monotonic()
    r = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": "many"},
        json={"model": "m", "messages": [{"role": "user", "content": "which port?"}]},
    )
    took = time.monotonic() - started
    assert r.status_code == 200, r.text
    block = fake_upstream.bodies()[-1]["messages"][0]["content"]
    assert block.startswith("<memory>") and texts[0] in block and texts[-1] not in block
    assert took < 1.0, took


def test_concurrent_accepts_store_each_fact_once(http: httpx.Client, db_dsn: str) -> None:
    shared = [f"Shared fact {i}." for i in range(5)]
    for n in range(12):
        suggest(db_dsn, f"s{n}", f"sug-{n}", [*shared, f"Own fact {n}."])

    def accept(sid: str) -> int:
        return http.post(f"/v1/memory/suggestions/{sid}/accept").status_code

    with ThreadPoolExecutor(12) as pool:
        codes = list(pool.map(accept, [f"sug-{n % 12}" for n in range(24)]))
    assert sorted(codes) == [200] * 12 + [400] * 12, codes
    stored = [f["text"] for f in http.get("/v1/memory", params={"limit": 1000}).json()["data"]]
    assert sorted(stored) == sorted([*shared, *(f"Own fact {n}." for n in range(12))])
    assert http.get("/v1/memory/suggestions").json()["data"] == []
