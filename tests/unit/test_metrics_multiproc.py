"""Several workers, one /metrics: prometheus-client's multiprocess mode (proxy/metrics.py).

Each "worker" is a separate Python process with ``PROMETHEUS_MULTIPROC_DIR`` set, as uvicorn's
workers are; a third process renders what any worker's ``/metrics`` would answer. The mode is
chosen when prometheus-client is imported, so this process (imported without it) cannot
play a worker itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

WORKER = """
import sys
from proxy.metrics import Metrics
m = Metrics.from_env()
assert m.multiprocess_dir is not None
m.requests.labels("/v1/chat/completions", "POST", "200").inc(int(sys.argv[1]))
m.inflight.inc()
m.note_reclaimed("eviction", 10)
m.token_usage.labels("chat", "input", "gpt-4o").observe(100)
if sys.argv[2] == "stops":
    m.close()
"""
RENDER = (
    "import sys; from proxy.metrics import Metrics; "
    "sys.stdout.write(Metrics.from_env().render().decode())"
)


def run_python(code: str, *args: str, env: dict[str, str]) -> str:
    """``python -c code args…`` in a fresh interpreter with ``env``; its stdout, once it
    exited 0 (else its stderr is the failure's message)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _value(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_two_workers_report_their_sum_through_either(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    run_python(WORKER, "3", "stops", env=env)  # a worker that shut down cleanly
    run_python(WORKER, "4", "runs", env=env)  # one still serving (its gauge file stays)
    text = run_python(RENDER, env=env)
    route = {"route": "/v1/chat/completions", "method": "POST", "status": "200"}
    assert _value(text, "cascade_requests_total", **route) == 7
    assert _value(text, "cascade_tokens_reclaimed_total", stage="eviction") == 20
    assert _value(text, "gen_ai_client_token_usage_count", gen_ai_token_type="input") == 2
    # the stopped worker's requests in flight left the sum when it closed
    assert _value(text, "cascade_inflight_requests") == 1
    assert "process_cpu_seconds_total" not in text  # per-process figures do not sum


def test_without_the_directory_a_process_reports_only_itself(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    code = WORKER.replace("assert m.multiprocess_dir is not None", "") + (
        "\nsys.stdout.write(m.render().decode())"
    )
    text = run_python(code, "5", "runs", env=env)
    assert _value(text, "cascade_requests_total") == 5
    assert list(tmp_path.iterdir()) == []
