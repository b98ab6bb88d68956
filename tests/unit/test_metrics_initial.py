"""Every labelled series README's Metrics names is exported at 0 from the start, so a
dashboard's rate() or an alert on it has a series before the first event."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy import metrics
from proxy.metrics import CREATED_ENV, RESULTS, STAGES, Metrics


def test_compaction_results_and_reclaimed_stages_are_exported_at_zero() -> None:
    text = Metrics().render().decode()
    for result in RESULTS:
        assert f'cascade_compactions_total{{result="{result}"}} 0.0' in text
    for stage in STAGES:
        assert f'cascade_tokens_reclaimed_total{{stage="{stage}"}} 0.0' in text


def _documented(metric: str) -> list[str]:
    """The label values README's Metrics bullet for ``metric`` names, in backticks."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    pattern = rf"^- `{metric}\{{\w+\}}`(?: \(\w+\))?:(.*?)(?=^- |\n\n)"  # its type, if said
    bullet = re.search(pattern, readme, re.M | re.S)
    assert bullet is not None, metric
    return re.findall(r"`(\w+)`", bullet.group(1))


def test_every_documented_label_value_is_exported_at_zero() -> None:
    text = Metrics().render().decode()
    results = _documented("cascade_compactions_total")
    expected = {
        "completed",
        "summary_failed",
        "server_busy",
        "history_changed",
        "agent_changed",
        "interrupted",
    }
    assert expected <= set(results)
    for result in results:  # a compaction closed as interrupted mid-run is counted too
        assert f'cascade_compactions_total{{result="{result}"}} 0.0' in text, result
    for stage in _documented("cascade_tokens_reclaimed_total"):
        assert f'cascade_tokens_reclaimed_total{{stage="{stage}"}} 0.0' in text, stage
    results = _documented("cascade_config_reloads_total")
    assert {"reloaded", "rejected"} <= set(results)
    for result in results:
        assert f'cascade_config_reloads_total{{result="{result}"}} 0.0' in text, result
    assert "cascade_config_last_reload_successful 1.0" in text  # a start took its file


def test_a_single_process_exports_the_runtimes_collectors() -> None:
    """prometheus-client's default exposition has them, and the stock Python dashboards read
    them: the process's, the interpreter's and its garbage collector's figures."""
    text = Metrics().render().decode()
    for name in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "python_info",
        'python_gc_collections_total{generation="0"}',
        'python_gc_objects_collected_total{generation="2"}',
        "python_gc_objects_uncollectable_total",
    ):
        assert name in text, name


def _first(monkeypatch: pytest.MonkeyPatch, **env: str) -> Metrics:
    """The process's first ``Metrics`` under ``env`` (the switch read afresh)."""
    monkeypatch.setattr(metrics, "_CREATED", None)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Metrics()


@pytest.fixture
def created_switch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(CREATED_ENV, raising=False)
    yield
    monkeypatch.delenv(CREATED_ENV, raising=False)
    _first(monkeypatch)  # the switch is the process's: back off for the tests after


def test_no_created_series_unless_prometheus_clients_switch_asks(
    monkeypatch: pytest.MonkeyPatch, created_switch: None
) -> None:
    assert "_created" not in _first(monkeypatch).render().decode()
    assert "cascade_requests_created" in _counted(_first(monkeypatch, **{CREATED_ENV: "false"}))


def test_the_first_app_sets_the_created_switch_for_the_process(
    monkeypatch: pytest.MonkeyPatch, created_switch: None, caplog: pytest.LogCaptureFixture
) -> None:
    """prometheus-client's switch is one global, read as each app renders: a second app
    made under another value turned the first one's series on (or off) under it."""
    first = _first(monkeypatch)
    monkeypatch.setenv(CREATED_ENV, "false")
    with caplog.at_level(logging.WARNING, "cascade.metrics"):
        second = Metrics()
    assert "_created" not in _counted(first) and "_created" not in _counted(second)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"{CREATED_ENV}=false asks for the *_created series on, but")


def _counted(metrics: Metrics) -> str:
    metrics.requests.labels("/v1/models", "GET", "200").inc()
    return metrics.render().decode()


def test_an_empty_created_switch_is_an_unset_one(
    monkeypatch: pytest.MonkeyPatch, created_switch: None
) -> None:
    """As every empty variable is (README): a compose file's ``PROMETHEUS_DISABLE_CREATED_SERIES:``
    left blank keeps them off, where prometheus-client reads it as ``false``."""
    assert "_created" not in _counted(_first(monkeypatch, **{CREATED_ENV: ""}))
