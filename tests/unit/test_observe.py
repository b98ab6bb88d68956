"""The Observe middleware's labels and the services' notes (proxy/observe.py), on a small
Starlette app under the same two middlewares the proxy installs; no database, no provider."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from proxy import requestlog
from proxy.cascade.types import (
    COMPACTION_COMPLETED,
    COMPACTION_FAILED,
    COMPACTION_STARTED,
    EVICTED,
    TRIMMED,
    TRUNCATED,
    USAGE,
    Event,
)
from proxy.metrics import Metrics
from proxy.middleware import AccessLog
from proxy.observe import (
    Observe,
    Observer,
    RequestObs,
    note_answer,
    note_compaction_event,
    note_step_events,
)


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    text = metrics.render().decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def _item(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def test_labels_are_route_templates_and_known_methods_only() -> None:
    metrics = Metrics()
    app = Starlette(
        routes=[Route("/items/{item_id}", _item, methods=["GET"])],
        middleware=[Middleware(AccessLog), Middleware(Observe, observer=Observer(metrics))],
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/items/secret-42")).status_code == 200
        assert (await client.request("BREW", "/items/secret-42")).status_code == 405
        assert (await client.get("/elsewhere/secret-43")).status_code == 404
    route = "/items/{item_id}"
    assert _value(metrics, "cascade_requests_total", route=route, method="GET", status="200") == 1
    # a method a client made up is "other": no client can mint label values
    assert _value(metrics, "cascade_requests_total", route=route, method="other", status="405") == 1
    assert _value(metrics, "cascade_requests_total", route="none", status="404") == 1
    text = metrics.render().decode()
    assert "secret-4" not in text and "BREW" not in text
    assert _value(metrics, "cascade_inflight_requests") == 0
    assert _value(metrics, "cascade_overhead_seconds_count") == 0  # no provider was called


def _observed(metrics: Metrics) -> tuple[RequestObs, object]:
    record = requestlog.RequestRecord("r1")
    record.obs = RequestObs(Observer(metrics), None)
    return record.obs, requestlog.begin(record)


def test_the_stages_events_count_by_stage() -> None:
    metrics = Metrics()
    obs, token = _observed(metrics)
    try:
        note_step_events(
            [
                Event(TRUNCATED, {"original_chars": 10_000, "kept_chars": 2_000}),
                Event(EVICTED, {"tokens_reclaimed": 700, "count": 2}),
                Event(TRIMMED, {"tokens_before": 5_000, "tokens_after": 3_000}),
                Event(USAGE, {"occupancy": 1}),
            ]
        )
        note_compaction_event(COMPACTION_STARTED, {"tokens_before": 9})
        note_compaction_event(COMPACTION_COMPLETED, {"tokens_before": 4_000, "tokens_after": 900})
        # the sweep's for one cut after its summary was stored: what it reclaimed is unknown
        note_compaction_event(COMPACTION_COMPLETED, {"tokens_before": 4_000, "tokens_after": None})
        note_compaction_event(COMPACTION_FAILED, {"reason": "summary_failed"})
        note_answer("gpt-4o", {"prompt_tokens": 50, "completion_tokens": 5})
        note_answer("gpt-4o", {"prompt_tokens": 60, "completion_tokens": 6})
    finally:
        requestlog.end(token)  # type: ignore[arg-type]
    stages = {"truncation": 2_000, "eviction": 700, "overflow": 2_000, "compaction": 3_100}
    for stage, tokens in stages.items():
        assert _value(metrics, "cascade_tokens_reclaimed_total", stage=stage) == tokens
    assert _value(metrics, "cascade_compactions_total", result="completed") == 2
    assert _value(metrics, "cascade_compactions_total", result="summary_failed") == 1
    assert _value(metrics, "gen_ai_client_token_usage_sum", gen_ai_token_type="input") == 110
    assert (obs.reclaimed, obs.input_tokens, obs.output_tokens) == (7_800, 110, 11)


def test_notes_outside_a_request_do_nothing() -> None:
    assert requestlog.current() is None
    note_step_events([Event(EVICTED, {"tokens_reclaimed": 700})])
    note_compaction_event(COMPACTION_COMPLETED, {"tokens_before": 2, "tokens_after": 1})
    note_answer("gpt-4o", {"prompt_tokens": 1})
