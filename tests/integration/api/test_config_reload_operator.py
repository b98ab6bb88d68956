"""What an operator reads of a reload. Its verdict is on ``/metrics``
(``cascade_config_reloads_total{result}``, ``cascade_config_last_reload_successful``): a
replica that refused a file rolled out to every replica (a ConfigMap's update) kept serving
the old config, and only its log said so. Its log line, as written (through the secret
scrub), names what changed and, refused, why: it said ``reloaded`` and nothing of what, and a
refused ``apiKeyEnv`` read ``apiKeyEnv: [REDACTED] an environment variable's name`` (so the
refusal names the provider, then its key: ``provider p: its apiKeyEnv is not …``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from proxy.logs import masked
from tests.integration.api.conftest import ProxyServer, Records
from tests.integration.api.test_config_reload import save
from tests.integration.api.test_metrics import Samples, scrape


def _until(proxy: ProxyServer, rejected: float, reloaded: float) -> Samples:
    deadline = time.monotonic() + 20  # generous: the watcher's recheck comes every 5 s
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


def test_the_log_says_what_a_reload_changed_and_why_one_was_refused(
    proxy: ProxyServer, config_path: Path, records: Records
) -> None:
    taken = json.loads(config_path.read_text())
    pasted = {**taken["providers"]["openai"], "apiKeyEnv": "sk-proj-5f0c2a9e71d4b388"}
    save(config_path, json.dumps({**taken, "providers": {"openai": pasted}}))
    _until(proxy, 1, 0)
    save(config_path, json.dumps({**taken, "models": {"gpt-4o": {"contextLimit": 64000}}}))
    _until(proxy, 1, 1)
    said = [masked(r.getMessage()) for r in records.records if r.name == "cascade.config"]
    assert said == [
        f"config {config_path} rejected, keeping the previous one: provider openai: its "
        "apiKeyEnv is not an environment variable's name (letters, digits, _, - and ., not "
        "starting with a digit); it names the variable that holds the key, never the key itself",
        f"config {config_path} reloaded: added models.gpt-4o; removed models.default",
    ]
