"""GET /metrics and X-Cascade-Overhead-Ms through the real proxy (issue 25, deliverable 1).

The proxy serves the fake upstream over loopback; each test reads the exposition text back
with prometheus-client's own parser, so a name, a label or a value that is wrong fails here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.settings import Settings
from tests.fakes.replies import Pacer, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config

__all__ = ["Samples", "scrape"]

MODEL = "gpt-4o"
CHAT_ROUTE = "/v1/chat/completions"
SESSION_ROUTE = "/s/{session_id}/v1/chat/completions"


class Samples:
    """One scrape, parsed: ``value(name, **labels)`` sums the samples that match."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        self.types = {f.name: f.type for f in text_string_to_metric_families(text)}

    def value(self, name: str, **labels: str) -> float:
        found = [
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        assert found, f"no sample {name}{labels}"
        return float(sum(found))

    def labels(self) -> set[str]:
        return {v for s in self.samples for v in s.labels.values()}


def scrape(origin: str) -> Samples:
    resp = httpx.get(f"{origin}/metrics", timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    return Samples(resp.text)


def post_chat(origin: str, path: str, sid: str | None = None, **body: Any) -> httpx.Response:
    headers = {"authorization": "Bearer sk-test-client"}
    if sid is not None:
        headers["x-session-id"] = sid
    payload = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], **body}
    return httpx.post(f"{origin}{path}", json=payload, headers=headers, timeout=20)


def test_every_metric_is_exported_before_any_traffic(proxy: ProxyServer) -> None:
    m = scrape(proxy.origin)
    assert m.types == m.types | {
        "cascade_requests": "counter",
        "cascade_request_duration_seconds": "histogram",
        "cascade_upstream_duration_seconds": "histogram",
        "cascade_overhead_seconds": "histogram",
        "cascade_inflight_requests": "gauge",
        "cascade_tokens_reclaimed": "counter",
        "cascade_compactions": "counter",
        "cascade_embedding_failures": "counter",
        "gen_ai_client_token_usage": "histogram",
    }
    # Nothing increments it yet (embeddings arrive with the memory stages): exported at 0.
    assert m.value("cascade_embedding_failures_total") == 0
    for stage in ("truncation", "eviction", "compaction", "overflow"):
        assert m.value("cascade_tokens_reclaimed_total", stage=stage) == 0
    for result in ("completed", "summary_failed", "history_changed", "interrupted"):
        assert m.value("cascade_compactions_total", result=result) == 0
    assert m.value("cascade_inflight_requests") == 1  # this scrape


def test_a_chat_request_is_counted_by_route_template_and_never_names_its_session(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("hi", usage=(321, 45)))
    resp = post_chat(proxy.origin, "/s/secret-session-77/v1/chat/completions")
    assert resp.status_code == 200, resp.text
    assert httpx.get(f"{proxy.origin}/no/such/thing", timeout=5).status_code == 404
    m = scrape(proxy.origin)
    assert m.value("cascade_requests_total", route=SESSION_ROUTE, method="POST", status="200") == 1
    assert m.value("cascade_requests_total", route="none", method="GET", status="404") == 1
    assert m.value("cascade_request_duration_seconds_count", route=SESSION_ROUTE) == 1
    assert m.value("cascade_upstream_duration_seconds_count", provider="openai") == 1
    assert m.value("cascade_overhead_seconds_count") == 1
    usage = {"gen_ai_request_model": MODEL, "gen_ai_operation_name": "chat"}
    assert m.value("gen_ai_client_token_usage_sum", gen_ai_token_type="input", **usage) == 321
    assert m.value("gen_ai_client_token_usage_sum", gen_ai_token_type="output", **usage) == 45
    assert m.value("gen_ai_client_token_usage_count", gen_ai_token_type="input", **usage) == 1
    # No label carries the session id, the tenant or the client's key, nor a raw path.
    assert "secret-session-77" not in m.text and "sk-test-client" not in m.text
    assert "/no/such/thing" not in m.text
    assert not any(v.startswith("/s/") and "{" not in v for v in m.labels())


def _overhead_ms(resp: httpx.Response) -> float:
    value = resp.headers.get("x-cascade-overhead-ms")
    assert value is not None, dict(resp.headers)
    return float(value)


def test_the_overhead_header_leaves_out_the_wait_for_the_provider(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("slow", first_byte_delay=1.0))
    t0 = time.monotonic()
    resp = post_chat(proxy.origin, CHAT_ROUTE, "overhead")
    took = time.monotonic() - t0
    assert resp.status_code == 200
    assert took >= 1.0
    m = scrape(proxy.origin)
    waited = m.value("cascade_upstream_duration_seconds_sum", provider="openai")
    assert waited >= 1.0
    # The provider's second is not the proxy's overhead: the two fit in the time the call
    # took, however long a loaded machine made the proxy's own part.
    assert 0 < _overhead_ms(resp) / 1000 <= took - waited, (_overhead_ms(resp), took, waited)
    assert m.value("cascade_overhead_seconds_sum") == pytest.approx(
        _overhead_ms(resp) / 1000, abs=0.001
    )


def test_an_error_answer_on_a_chat_route_carries_the_header_too(proxy: ProxyServer) -> None:
    resp = post_chat(proxy.origin, CHAT_ROUTE, "bad", messages=[])
    assert resp.status_code == 400
    assert _overhead_ms(resp) >= 0
    assert "x-cascade-overhead-ms" not in httpx.get(f"{proxy.origin}/healthz").headers


@pytest.fixture
def slow_keepalive_proxy(db_dsn: str, config_path: Path) -> Iterator[ProxyServer]:
    settings = Settings(
        database_url=db_dsn, config=config_path, keepalive_seconds=0.8, watch_config=False
    )
    server = ProxyServer(settings).start()
    yield server
    server.stop()


def test_a_stream_counts_the_overhead_until_the_providers_first_byte(
    slow_keepalive_proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The response starts with a keep-alive while the provider is still silent: the wait so
    far is the provider's, not the proxy's, and the stream after it is the provider's too."""
    fake_upstream.script(reply("one two three", first_byte_delay=1.5, chunk_delay=0.3))
    origin = slow_keepalive_proxy.origin
    t0 = time.monotonic()
    resp = post_chat(origin, CHAT_ROUTE, "stream-overhead", stream=True)
    assert resp.status_code == 200 and "[DONE]" in resp.text
    assert time.monotonic() - t0 >= 1.5
    # The response started with the first keep-alive, 0.8 s in, the provider silent: had
    # the wait counted, it would be all of that (and the stream after it more).
    assert 0 < _overhead_ms(resp) < 800
    m = scrape(origin)
    assert m.value("cascade_overhead_seconds_count") == 1
    usage = {"gen_ai_request_model": MODEL, "gen_ai_token_type": "output"}
    assert m.value("gen_ai_client_token_usage_count", **usage) == 1


def test_requests_in_flight_are_counted_while_they_run(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    pacer = Pacer()  # the streamed answer stays unfinished until the scrape saw it
    fake_upstream.script(reply("slow", chunks=3, pacer=pacer))
    worker = threading.Thread(
        target=post_chat, args=(proxy.origin, CHAT_ROUTE, "inflight"), kwargs={"stream": True}
    )
    worker.start()
    try:
        deadline = time.monotonic() + 5
        while scrape(proxy.origin).value("cascade_inflight_requests") != 2:
            assert time.monotonic() < deadline, "the slow request was never counted in flight"
            time.sleep(0.05)
    finally:
        pacer.allow(10)
        worker.join()
    assert not pacer.expired
    assert scrape(proxy.origin).value("cascade_inflight_requests") == 1


def test_truncation_reports_the_tokens_it_reclaimed(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    context = {
        "toolOutput": {"maxChars": 1000, "persistRaw": True},
        "eviction": {"enabled": False},
        "summarize": {"enabled": False},
    }
    path = write_config(tmp_path / "agents.json", fake_upstream.url, context=context)
    server = ProxyServer(Settings(database_url=db_dsn, config=path, watch_config=False)).start()
    try:
        call = tool_call("read_file", {"path": "big.log"}, id="call_big")
        messages = [
            {"role": "user", "content": "look at the log"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_big", "content": "x" * 9000},
        ]
        assert post_chat(server.origin, CHAT_ROUTE, "trunc", messages=messages).status_code == 200
        reclaimed = scrape(server.origin).value(
            "cascade_tokens_reclaimed_total", stage="truncation"
        )
    finally:
        server.stop()
    assert 8000 // 4 - 100 <= reclaimed < 9000 // 4  # the omitted characters / 4


def test_the_overflow_guard_reports_the_tokens_it_dropped(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    from tests.integration.api.compaction_stack import Agent
    from tests.integration.api.test_overflow_guard import rounds, small_window

    with small_window(tmp_path, db_dsn, fake_upstream, summarize={"enabled": False}) as s:
        agent = Agent(s.client("trim-metrics"))
        agent.messages += rounds(8)
        agent.step()
        (trimmed,) = s.events("trim-metrics", "context.trimmed")
        m = scrape(s.proxy.origin)
    dropped = trimmed["tokens_before"] - trimmed["tokens_after"]
    assert dropped > 0
    assert m.value("cascade_tokens_reclaimed_total", stage="overflow") == dropped


def test_eviction_reports_the_tokens_it_reclaimed(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    from tests.integration.api.test_eviction import Agent, write
    from tests.integration.transcripts import api

    path = write(tmp_path / "agents.json", fake_upstream.url)
    server = ProxyServer(Settings(database_url=db_dsn, config=path, watch_config=False)).start()
    try:
        Agent(server, fake_upstream).run_until_evicted()
        reclaimed = scrape(server.origin).value("cascade_tokens_reclaimed_total", stage="eviction")
        with api(server) as http:
            session = http.get("/v1/sessions/agent").json()
    finally:
        server.stop()
    assert reclaimed >= 300
    assert reclaimed == pytest.approx(session["reclaimed_tokens"], rel=0.05)
