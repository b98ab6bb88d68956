"""Regression: ``gen_ai_request_model`` is the client's ``model`` string, so a client that
sent a fresh name on every request (or a 5,000-character one) added series to /metrics
without bound. The label keeps the first ``MODEL_LABELS`` short printable names, then
``other``."""

from __future__ import annotations

from proxy.metrics import MODEL_LABELS, OTHER_MODEL, Metrics

_USAGE = {"prompt_tokens": 10, "completion_tokens": 2}


def _models(metrics: Metrics) -> set[str]:
    text = metrics.render().decode()
    return {
        line.split('gen_ai_request_model="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("gen_ai_client_token_usage_count{")
    }


def test_distinct_model_names_stop_adding_series_past_the_bound() -> None:
    metrics = Metrics()
    for i in range(MODEL_LABELS * 3):
        metrics.note_usage("chat", f"attacker-model-{i}", _USAGE)
    models = _models(metrics)
    assert len(models) == MODEL_LABELS + 1
    assert OTHER_MODEL in models
    assert "attacker-model-0" in models
    assert f"attacker-model-{MODEL_LABELS}" not in models


def test_a_name_seen_before_the_bound_keeps_its_own_series() -> None:
    metrics = Metrics()
    metrics.note_usage("chat", "gpt-4o", _USAGE)
    for i in range(MODEL_LABELS * 2):
        metrics.note_usage("chat", f"m{i}", _USAGE)
    metrics.note_usage("chat", "gpt-4o", _USAGE)
    text = metrics.render().decode()
    assert (
        'gen_ai_client_token_usage_count{gen_ai_operation_name="chat",'
        'gen_ai_request_model="gpt-4o",gen_ai_token_type="input"} 2.0'
    ) in text


def test_a_long_or_unprintable_name_is_other() -> None:
    metrics = Metrics()
    for name in ("x" * 5000, "a b", "line\nbreak", "caf\u00e9", ""):
        metrics.note_usage("chat", name, _USAGE)
    assert _models(metrics) == {OTHER_MODEL}
