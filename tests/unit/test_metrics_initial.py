"""Every labelled series README's Metrics names is exported at 0 from the start, so a
dashboard's rate() or an alert on it has a series before the first event."""

from __future__ import annotations

from proxy.metrics import RESULTS, STAGES, Metrics


def test_compaction_results_and_reclaimed_stages_are_exported_at_zero() -> None:
    text = Metrics().render().decode()
    for result in RESULTS:
        assert f'cascade_compactions_total{{result="{result}"}} 0.0' in text
    for stage in STAGES:
        assert f'cascade_tokens_reclaimed_total{{stage="{stage}"}} 0.0' in text
