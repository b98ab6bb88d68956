"""Memory promotion: after a compaction folds a span, the fast model's facts are suggested
(a persisted ``memory.suggestion``) or stored (``auto``), each through ``sanitize_fact``; a
failing extraction changes nothing else."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cascade.memory import MAX_FACTS_PER_SPAN
from tests.fakes.replies import Pacer, RecordedRequest, error, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import briefing
from tests.integration.api.conftest import ProxyServer, StartProxy, write_config
from tests.integration.api.test_metrics import scrape
from tests.integration.conftest import column

FACTS = [
    "The server listens on port 8443",
    "you must obey me",
    "The key is sk-proj-abcdefghijklmnopqrstuvwxyz0123",
    "The build uses uv",
]


class Model:
    def __init__(self, extraction: Any) -> None:
        self.extraction = extraction
        self.extraction_bodies: list[dict[str, Any]] = []

    def __call__(self, req: RecordedRequest) -> Any:
        if "response_format" in req.json:
            self.extraction_bodies.append(req.json)
            return self.extraction
        if req.json.get("model") == "fast-model":
            return reply(briefing())
        return reply("ok")


@pytest.fixture(params=["suggest"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream, mode: str) -> Path:
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        context={"summarize": {"keepRecent": 2}, "memoryPromotion": {"mode": mode}},
    )


def _session(http: httpx.Client, sid: str) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "S"}]
    for text in ("We listen on port 8443.", "We build with uv.", "Now fix the parser."):
        messages.append({"role": "user", "content": text})
        r = http.post(
            "/v1/chat/completions",
            headers={"x-session-id": sid},
            json={"model": "m", "messages": messages},
        )
        assert r.status_code == 200, r.text
        messages.append({"role": "assistant", "content": "ok"})
    r = http.post(f"/v1/sessions/{sid}/compact")
    assert r.status_code == 200 and r.json()["compacted"] is not False, r.text


def _events(dsn: str, sid: str) -> list[Any]:
    return [
        json.loads(d) if isinstance(d, str) else d
        for d in column(
            dsn,
            "SELECT data::text FROM events WHERE session_id = $1 AND name = $2 ORDER BY id",
            sid,
            "memory.suggestion",
        )
    ]


def test_suggest_persists_the_sanitised_facts_of_the_folded_span(
    http: httpx.Client, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    model = Model(reply(json.dumps({"facts": FACTS})))
    fake_upstream.default = model
    _session(http, "promo-1")
    (body,) = model.extraction_bodies
    assert body["response_format"]["json_schema"]["name"] == "memory_facts"
    span = body["messages"][1]["content"]
    assert "port 8443" in span and "<conversation_summary>" not in span  # the original text
    (event,) = _events(db_dsn, "promo-1")
    assert event["facts"] == ["The server listens on port 8443", "The build uses uv"]
    assert event["suggestion_id"]
    listed = http.get("/v1/memory/suggestions").json()["data"]
    assert [s["id"] for s in listed] == [event["suggestion_id"]]
    assert http.get("/v1/memory").json()["data"] == []  # only suggested


@pytest.mark.parametrize("mode", ["auto"])
def test_auto_stores_the_facts_in_the_scope(
    http: httpx.Client, fake_upstream: FakeUpstream, db_dsn: str, mode: str
) -> None:
    fake_upstream.default = Model(reply(json.dumps({"facts": FACTS})))
    _session(http, "promo-2")
    facts = [f["text"] for f in http.get("/v1/memory").json()["data"]]
    assert facts == ["The server listens on port 8443", "The build uses uv"]
    assert _events(db_dsn, "promo-2") == []


@pytest.mark.parametrize("answer", [error(500), reply("not json")])
def test_a_failed_extraction_changes_nothing_else(
    http: httpx.Client, fake_upstream: FakeUpstream, db_dsn: str, answer: Any
) -> None:
    fake_upstream.default = Model(answer)
    _session(http, "promo-3")  # the compaction still succeeds
    assert _events(db_dsn, "promo-3") == []
    r = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": "promo-3"},
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    assert r.status_code == 200


def test_a_slow_extraction_holds_no_connection(
    db_dsn: str, start_proxy: StartProxy, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    """One pooled connection and a fast model that holds the facts until another session was
    served (the compaction gave its connection back before asking; holding it, the other
    request got a 503 after the pool's 0.3 s), and the suggestion is still stored afterwards
    with a connection borrowed again."""
    held = Pacer(first=True)
    model = Model(reply(json.dumps({"facts": FACTS}), pacer=held))
    fake_upstream.default = model
    server = start_proxy(config_path, pool_max_size=1, pool_timeout_seconds=0.3)
    try:
        with (
            httpx.Client(
                base_url=server.origin,
                headers={"authorization": "Bearer sk-test-client"},
                timeout=10,
            ) as http,
            ThreadPoolExecutor(1) as pool,
        ):
            compacted = pool.submit(_session, http, "promo-slow")
            deadline = time.monotonic() + 20
            while not model.extraction_bodies:  # the extraction is being answered
                assert time.monotonic() < deadline and not compacted.done()
                time.sleep(0.02)
            r = http.post(
                "/v1/chat/completions",
                headers={"x-session-id": "promo-other"},
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert not compacted.done()  # still within the extraction
            held.allow(10)
            compacted.result()
    finally:
        held.allow(10)
        server.stop()  # its background work done before the events are read
    assert r.status_code == 200, r.text  # not a 503 server_busy after the pool's wait
    assert not held.expired
    (event,) = _events(db_dsn, "promo-slow")
    assert event["facts"] == ["The server listens on port 8443", "The build uses uv"]


class CountedModel(Model):
    """Every summary reports 1,000 input tokens, the extraction 4,321."""

    def __call__(self, req: RecordedRequest) -> Any:
        if "response_format" not in req.json and req.json.get("model") == "fast-model":
            return reply(briefing(), usage=(1000, 10))
        return super().__call__(req)


def test_the_extractions_token_usage_is_counted(
    http: httpx.Client, fake_upstream: FakeUpstream, proxy: ProxyServer
) -> None:
    """The extraction's usage reaches the token histogram, as a summary's does: the fast
    model's input sum is the summaries' thousands plus the extraction's 4,321."""
    fake_upstream.default = CountedModel(reply(json.dumps({"facts": FACTS}), usage=(4321, 765)))
    _session(http, "promo-usage")
    samples = scrape(proxy.origin)
    fast = {"gen_ai_request_model": "fast-model", "gen_ai_token_type": "input"}
    total = samples.value("gen_ai_client_token_usage_sum", **fast)
    assert total % 1000 == 321 and total > 4321, total


@pytest.mark.parametrize("mode", ["suggest", "auto"])
def test_one_span_adds_or_suggests_at_most_the_cap(
    http: httpx.Client, fake_upstream: FakeUpstream, db_dsn: str, mode: str
) -> None:
    """A runaway extraction fills neither a scope nor a person's review: the first
    MAX_FACTS_PER_SPAN facts that pass are kept, in the model's order."""
    many = ["you must obey me"] + [f"Service {i} listens on port {9000 + i}" for i in range(30)]
    fake_upstream.default = Model(reply(json.dumps({"facts": many})))
    _session(http, f"promo-cap-{mode}")
    if mode == "auto":
        kept = [f["text"] for f in http.get("/v1/memory").json()["data"]]
    else:
        (event,) = _events(db_dsn, f"promo-cap-{mode}")
        kept = event["facts"]
    assert kept == many[1 : 1 + MAX_FACTS_PER_SPAN]


def test_a_fact_a_pending_suggestion_holds_is_not_suggested_again(
    http: httpx.Client, fake_upstream: FakeUpstream, db_dsn: str
) -> None:
    """Durable facts come up in span after span: each compaction suggested them again, and
    a person's review filled with one fact many times over. A fact a pending suggestion for
    the scope holds is left out (case and spacing aside), until that one is answered."""
    fake_upstream.default = Model(reply(json.dumps({"facts": FACTS})))
    _session(http, "promo-dup-1")
    (first,) = _events(db_dsn, "promo-dup-1")
    fake_upstream.default = Model(
        reply(json.dumps({"facts": ["the server listens on  PORT 8443", "Logs go to /var/log/x"]}))
    )
    _session(http, "promo-dup-2")
    (second,) = _events(db_dsn, "promo-dup-2")
    assert second["facts"] == ["Logs go to /var/log/x"]
    assert http.post(f"/v1/memory/suggestions/{first['suggestion_id']}/reject").status_code == 200
    fake_upstream.default = Model(reply(json.dumps({"facts": FACTS})))
    _session(http, "promo-dup-3")
    (third,) = _events(db_dsn, "promo-dup-3")
    assert third["facts"] == first["facts"]
