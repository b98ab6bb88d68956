"""Several workers, one /metrics: prometheus-client's multiprocess mode (proxy/metrics.py).

Each "worker" is a separate Python process with ``PROMETHEUS_MULTIPROC_DIR`` set, as uvicorn's
workers are; a third process renders what any worker's ``/metrics`` would answer. The mode is
chosen when prometheus-client is imported, so this process (imported without it) cannot
play a worker itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
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
if sys.argv[2] == "stops":  # a series one worker only wrote
    m.upstream_errors.labels("openai", "ReadError").inc()
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


@contextlib.contextmanager
def serving(env: dict[str, str], requests: str) -> Iterator[None]:
    """A worker that counted ``requests`` and is still serving one, until the block ends."""
    code = WORKER + "\nprint('ready', flush=True)\nsys.stdin.read()\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, requests, "runs"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def test_two_workers_report_their_sum_through_either(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    run_python(WORKER, "3", "stops", env=env)  # a worker that shut down cleanly
    with serving(env, "4"):  # one still serving (its gauge file stays)
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


def _start(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_dead_processs_requests_in_flight_leave_the_sum_at_the_next_start(
    tmp_path: Path,
) -> None:
    """A worker killed while serving (no ``close``) leaves its live gauge behind, as does a
    previous run's: the next process to start drops it, since no process has that pid, and
    says that the directory holds an earlier process's counts, which are summed in."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    run_python(WORKER, "4", "killed", env=env)  # exits without close: its files stay
    done = _start("import logging, sys; logging.basicConfig(stream=sys.stderr)\n" + RENDER, env)
    assert done.returncode == 0, done.stderr
    assert _value(done.stdout, "cascade_inflight_requests") == 0
    # counters stay: a deployment that empties the directory gets none, one that does not
    # is told, once
    assert _value(done.stdout, "cascade_requests_total") == 4
    (warning,) = [line for line in done.stderr.splitlines() if "PROMETHEUS_MULTIPROC_DIR" in line]
    assert f"{tmp_path} holds the figures of 1 process no longer running" in warning


def test_a_reused_pid_does_not_take_over_an_earlier_processs_figures(tmp_path: Path) -> None:
    """A container's restart gives its worker the pid the last run's had: prometheus-client
    would open that process's files and go on from its values (a gauge of requests in
    flight that never goes back to 0). The file bearing this process's pid when it starts
    is an earlier process's, and is dropped before any metric is made."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    run_python(WORKER, "4", "killed", env=env)
    code = (
        "import os, pathlib, sys\n"
        f"d = pathlib.Path({str(tmp_path)!r})\n"
        "for f in list(d.iterdir()):\n"
        "    kind = f.name.rsplit('_', 1)[0]\n"
        "    f.rename(d / f'{kind}_{os.getpid()}.db')\n"
        "from proxy.metrics import Metrics\n"
        "m = Metrics.from_env()\n"
        "m.requests.labels('/healthz', 'GET', '200').inc()\n"
        "sys.stdout.write(m.render().decode())\n"
    )
    text = run_python(code, env=env)
    assert _value(text, "cascade_inflight_requests") == 0
    route = {"route": "/v1/chat/completions", "method": "POST", "status": "200"}
    assert _value(text, "cascade_requests_total", **route) == 0
    assert _value(text, "cascade_requests_total", route="/healthz") == 1


RELOADED = """
import sys
from proxy.metrics import Metrics
m = Metrics.from_env()
m.note_config(sys.argv[1])
if sys.argv[2] == "serves":
    print("ready", flush=True)
    sys.stdin.read()
else:
    sys.stdout.write(m.render().decode())
"""


def test_with_several_workers_the_config_is_taken_while_every_one_took_it(
    tmp_path: Path,
) -> None:
    """Each worker reloads the file itself: ``cascade_config_reloads_total`` counts each
    worker's verdict, and ``cascade_config_last_reload_successful`` is 0 while any serving
    worker refused the file (summed, or the highest, it would say 1)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    with subprocess.Popen(
        [sys.executable, "-c", RELOADED, "config.rejected", "serves"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as refused:
        assert refused.stdout is not None and refused.stdout.readline() == "ready\n"
        text = run_python(RELOADED, "config.reloaded", "renders", env=env)
        assert refused.stdin is not None
        refused.stdin.close()
    assert _value(text, "cascade_config_reloads_total", result="reloaded") == 1
    assert _value(text, "cascade_config_reloads_total", result="rejected") == 1
    assert _value(text, "cascade_config_last_reload_successful") == 0


def test_a_fresh_scrape_has_every_documented_metric_with_its_type(tmp_path: Path) -> None:
    """A worker's first ``/metrics``, while two workers have written only some series: every
    metric README lists has its ``# TYPE`` line (and ``# HELP``) of its own type, a labelled
    one with no series yet too. prometheus-client's multiprocess collector knows only what
    some worker's files hold, so a dashboard's query of a metric no worker touched yet (a
    provider error) would find no metric at all rather than a metric with no series."""
    from tests.unit.test_readme_metrics import _documented

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    run_python(WORKER, "3", "stops", env=env)
    with serving(env, "4"):
        text = run_python(RENDER, env=env)
    types = dict(re.findall(r"^# TYPE (\S+) (\w+)$", text, re.M))
    helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    for name, (_, kind) in _documented().items():
        family = name.removesuffix("_total") if kind == "counter" else name
        assert types.get(family) == kind or types.get(name) == kind, f"no # TYPE for {name}"
        assert family in helps or name in helps, f"no # HELP for {name}"
    assert _value(text, "cascade_requests_total") == 7  # the series written are all there
    assert _value(text, "cascade_upstream_errors_total", error_type="ReadError") == 1
    # one family per name: two # TYPE lines for one make Prometheus refuse the whole scrape
    typed = re.findall(r"^# TYPE (\S+) ", text, re.M)
    assert sorted(typed) == sorted(set(typed)), typed
    parsed = [f.name for f in text_string_to_metric_families(text)]
    assert sorted(parsed) == sorted(set(parsed)) and len(parsed) == len(typed)
