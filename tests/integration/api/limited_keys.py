"""A proxy with two keys of one tenant, one limited to the ``reviewer`` agent and one not,
and three agents on the fake provider: the set-up of the tests of what a limited key
reaches (sessions, memory suggestions)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, write_config

__all__ = ["LIMITED", "FULL", "TENANT", "AGENTS", "start_with_limited_key", "client"]

LIMITED = "cascade-key-reviewer-0c51d2"
FULL = "cascade-key-full-e84b17"
TENANT = "team"
AGENTS = {
    "default": {"provider": "openai"},
    "coder": {"provider": "openai"},
    "reviewer": {"provider": "openai"},
}


def start_with_limited_key(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limited_to: Sequence[str] = ("reviewer",),
    **config: Any,
) -> ProxyServer:
    """The proxy, its config given ``config`` besides the keys (``agents`` replaces the
    three agents); the limited key may use the agents ``limited_to``."""
    monkeypatch.setenv("CASCADE_TEST_KEY_LIMITED", LIMITED)
    monkeypatch.setenv("CASCADE_TEST_KEY_FULL", FULL)
    auth = {
        "keys": [
            {"keyEnv": "CASCADE_TEST_KEY_LIMITED", "tenant": TENANT, "agents": [*limited_to]},
            {"keyEnv": "CASCADE_TEST_KEY_FULL", "tenant": TENANT},
        ]
    }
    config.setdefault("agents", AGENTS)
    path = write_config(tmp_path / "agents.json", fake_upstream.url, auth=auth, **config)
    return start_proxy(path)


def client(origin: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=origin, timeout=10, headers={"authorization": f"Bearer {key}"})
