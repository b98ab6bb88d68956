"""A fast model's success that holds nothing usable (an error object sent with a 200, a body
that is no chat completion) is a failed provider call in ``cascade_upstream_errors_total``,
as the agent's own calls' are: a summariser's gateway answering every call so failed every
compaction, and the counter an alert reads said nothing."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy import requestlog
from proxy.answers import Answer
from proxy.metrics import Metrics
from proxy.observe import Observer, RequestObs
from proxy.services.fastmodel import read_fast_answer

_JOB = SimpleNamespace(provider=SimpleNamespace(name="fast"), fast_model="mini")


def _errors(metrics: Metrics) -> dict[str, float]:
    return {
        s.labels["error_type"]: s.value
        for f in text_string_to_metric_families(metrics.render().decode())
        for s in f.samples
        if s.name == "cascade_upstream_errors_total"
    }


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (json.dumps({"error": {"message": "overloaded", "type": "server_error"}}), "error_answer"),
        ('data: {"error": {"message": "overloaded"}}\n\ndata: [DONE]\n\n', "error_answer"),
        (json.dumps({"error": "overloaded"}), "error_answer"),
        (json.dumps({"error": {"message": "overloaded"}, "choices": []}), "error_answer"),
        ("<html>sign in</html>", "UpstreamBadResponse"),
        (json.dumps({"choices": []}), "UpstreamBadResponse"),
    ],
)
def test_a_fast_success_with_nothing_usable_is_a_failed_call(body: str, kind: str) -> None:
    metrics = Metrics()
    record = requestlog.RequestRecord("r1")
    record.obs = RequestObs(Observer(metrics), None)
    token = requestlog.begin(record)
    request = httpx.Request("POST", "http://fast.test/v1/chat/completions")
    try:
        with pytest.raises((ValueError, LookupError, TypeError, AttributeError)):
            read_fast_answer(_JOB, Answer(200, httpx.Headers(), body.encode(), request))
    finally:
        requestlog.end(token)
    assert _errors(metrics) == {kind: 1.0}
