"""The in-process proxy's harness (tests/integration/api/conftest.py): a stop wakes uvicorn's
main loop rather than waiting for its next look at ``should_exit``."""

from __future__ import annotations

import time

import pytest

from proxy.settings import Settings
from tests.integration.api.conftest import ProxyServer, _Server, stop_all


def test_a_stop_does_not_wait_for_the_main_loops_tick(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Server, "tick", 60.0)  # without the wake, a stop would take a minute
    servers = [ProxyServer(settings).start() for _ in range(2)]
    began = time.monotonic()
    stop_all(servers)
    assert time.monotonic() - began < 10
    assert not any(server._thread.is_alive() for server in servers)
