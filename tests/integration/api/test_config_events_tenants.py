"""Regression: with proxy keys, ``config.*`` events went to every tenant's open streams with
the config file's path and, for a refused file, the refusal, which names the operator's
entries: other tenants' key variables (``$CASCADE_KEY_ACME``) and agents. A tenant is not
the operator: with proxy keys the frame says only what happened (the log keeps the reason);
without them (one user, on loopback) it keeps saying why, as before."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from proxy.cascade.types import CONFIG_REJECTED, CONFIG_RELOADED, USAGE
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config
from tests.integration.api.test_config_reload import assert_config_frame, named, save
from tests.integration.api.test_events import MODEL, open_events, user

KEY_A = "cascade-key-tenant-a-5f1e"
AUTH = {
    "keys": [
        {"keyEnv": "CASCADE_KEY_A", "tenant": "a"},
        {"keyEnv": "CASCADE_KEY_ACME", "tenant": "acme"},
    ]
}


def test_with_proxy_keys_a_tenants_stream_gets_no_path_nor_reason(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CASCADE_KEY_A", KEY_A)
    monkeypatch.setenv("CASCADE_KEY_ACME", "cascade-key-acme-77aa")
    path = write_config(tmp_path / "agents.json", fake_upstream.url, auth=AUTH)
    origin = start_proxy(path, watch_config=True).origin
    with httpx.Client(headers={"authorization": f"Bearer {KEY_A}"}, timeout=10) as http:
        sent = http.post(
            f"{origin}/v1/chat/completions",
            json={"model": MODEL, "messages": [user("hi")]},
            headers={"x-session-id": "s"},
        )
        assert sent.status_code == 200, sent.text
    with open_events(origin, "s", token=KEY_A) as events:
        events.until(named(USAGE))
        refused = json.loads(path.read_text())
        refused["auth"]["keys"][1]["agents"] = ["acme-secret-agent"]
        save(path, json.dumps(refused))
        rejected = events.until(named(CONFIG_REJECTED))[-1]
        assert_config_frame(rejected, "s")
        assert set(rejected.data) == {"session_id", "ts"}, rejected.data
        for leaked in ("CASCADE_KEY_ACME", "acme", str(tmp_path)):
            assert leaked not in rejected.raw
        write_config(path, fake_upstream.url, auth=AUTH, models={"default": {"contextLimit": 9000}})
        reloaded = events.until(named(CONFIG_RELOADED))[-1]
        assert set(reloaded.data) == {"session_id", "ts"}, reloaded.data
        assert str(tmp_path) not in reloaded.raw
