"""The retrieval benchmark runs end to end in its quick form and reports both bars."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.retrieval import evaluate, render_markdown

ROOT = Path(__file__).resolve().parents[2]


def _result(added: float, rate: float) -> dict:
    return {
        "meta": {"when": "now", "machine": "m", "command": "c", "size": 10, "requests": 2},
        "turns": {
            "on_p50_ms": 10 + added,
            "off_p50_ms": 10.0,
            "added_p50_ms": added,
            "ratio": (10 + added) / 10,
            "retrieval_took_p50_ms": 1.0,
        },
        "embedding": {
            "worker_rate": rate,
            "embedder_alone_rate": 2 * rate,
            "ratio_to_embedder_alone": 0.5,
        },
        "search_plan": ["Limit"],
    }


def test_the_bars_are_judged_on_the_added_median_and_the_worker_rate() -> None:
    good = _result(added=14.9, rate=300.0)
    assert {k: v["met"] for k, v in evaluate(good).items()} == {
        "added_p50_ms": True,
        "embedding_rate": True,
    }
    bad = _result(added=15.1, rate=299.0)
    assert not any(v["met"] for v in evaluate(bad).values())
    bad["targets"] = evaluate(bad)
    assert "NOT met" in render_markdown(bad)


@pytest.mark.timeout(300)
def test_the_quick_run_finishes_and_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "retrieval.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.retrieval", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert set(result["targets"]) == {"added_p50_ms", "embedding_rate"}
    assert result["turns"]["errors"] == 0 and result["turns"]["hits_p50"] >= 0
    assert result["embedding"]["worker_rate"] > 0 and result["search_plan"]
    assert out.with_suffix(".md").exists()
