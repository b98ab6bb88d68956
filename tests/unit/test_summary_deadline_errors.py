"""A summary call cut off by ``summarize.timeoutSeconds`` got no answer in time: it counts in
``cascade_upstream_errors_total`` as ``unreachable`` (and its span is ERROR), as README
says of a call without an answer, in time or at all. Only a call the proxy gave up for a
client gone (or a stop) is no provider's failure; the deadline is the provider's."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy import requestlog
from proxy.cascade.types import CompactionPlan
from proxy.config import ModelConfig, parse_config
from proxy.config_context import SummarizeConfig
from proxy.metrics import Metrics
from proxy.observe import Observer, RequestObs
from proxy.services.compaction_job import SummaryCallError, summarise
from proxy.upstream import Upstream


def _errors(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {
        (s.labels["provider"], s.labels["error_type"]): s.value
        for f in text_string_to_metric_families(metrics.render().decode())
        for s in f.samples
        if s.name == "cascade_upstream_errors_total"
    }


async def test_a_summary_call_past_its_deadline_is_unreachable() -> None:
    async def silent(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)  # a provider that never answers
        raise AssertionError("unreachable")

    cfg = parse_config({"providers": {"p": {"baseUrl": "http://p.test/v1"}}}, {})
    upstream = Upstream(httpx.AsyncClient(transport=httpx.MockTransport(silent)), env={})
    job: Any = SimpleNamespace(
        session_id="s-1",
        provider=cfg.providers["p"],
        headers={},
        query=(),
        fast_model="fast",
        fast_limits=ModelConfig(),
        cfg=SummarizeConfig(maxAttempts=1, timeoutSeconds=0.1),
    )
    plan = CompactionPlan(0, 1, ({"role": "user", "content": "hi"},), None)
    metrics = Metrics()
    record = requestlog.RequestRecord("r1")
    record.obs = RequestObs(Observer(metrics), None)
    token = requestlog.begin(record)
    try:
        with pytest.raises(SummaryCallError):
            await summarise(upstream, job, plan, count=lambda ms: len(str(ms)))
    finally:
        requestlog.end(token)
    assert _errors(metrics) == {("p", "unreachable"): 1.0}
