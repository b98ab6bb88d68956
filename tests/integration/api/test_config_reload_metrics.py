"""A reload's verdict is on ``/metrics`` (``cascade_config_reloads_total{result}``,
``cascade_config_last_reload_successful``): a replica that refused a file rolled out to
every replica (a ConfigMap's update) kept serving the old config, and only its log said so."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_config_reload import save
from tests.integration.api.test_metrics import Samples, scrape


def _until(proxy: ProxyServer, rejected: float, reloaded: float) -> Samples:
    deadline = time.monotonic() + 5
    while True:
        m = scrape(proxy.origin)
        counts = (
            m.value("cascade_config_reloads_total", result="rejected"),
            m.value("cascade_config_reloads_total", result="reloaded"),
        )
        if counts == (rejected, reloaded):
            return m
        assert time.monotonic() < deadline, counts
        time.sleep(0.05)


def test_a_refused_file_shows_on_metrics_until_one_is_taken(
    proxy: ProxyServer, config_path: Path
) -> None:
    taken = json.loads(config_path.read_text())
    assert _until(proxy, 0, 0).value("cascade_config_last_reload_successful") == 1

    typo = {**taken, "models": {"default": {"contextLimt": 64000}}}
    save(config_path, json.dumps(typo))
    assert _until(proxy, 1, 0).value("cascade_config_last_reload_successful") == 0

    save(config_path, json.dumps({**taken, "models": {"default": {"contextLimit": 64000}}}))
    assert _until(proxy, 1, 1).value("cascade_config_last_reload_successful") == 1
