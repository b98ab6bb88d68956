"""A replica SIGKILLed while it holds a session's lease (mid-stream) frees the session within
the lease's bound: another replica, a process of its own on the same database, is served
on that session once the lease expires, never before (README, Capacity)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from proxy.store.leases import POLL_MAX_SECONDS
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.reliability.conftest import Figures, write_config

AUTH = {"authorization": "Bearer sk-test-client", "x-session-id": "held"}
TTL = Settings.model_fields["lease_ttl_seconds"].default
# two replicas' starts (each waits up to 30 s for /readyz on a loaded machine), the kill and
# the lease's bound: more than the suite's 60 s default
pytestmark = pytest.mark.timeout(150)
SLACK = 1.5  # the second replica's own request: its statements and the provider's answer


def test_a_killed_replicas_session_is_free_within_the_lease_bound(
    proxy_process: Any,
    fake_upstream: FakeUpstream,
    db_dsn: str,
    tmp_path: Path,
    figures: Figures,
) -> None:
    """SIGKILL of the replica streaming on a session: another replica gets it within the bound."""
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    a, b = proxy_process(config), proxy_process(config)
    fake_upstream.script(reply("never stored " * 50, chunks=600, chunk_delay=0.1))
    fake_upstream.default = reply("served by the other replica")
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "q"}]}
    # mid-answer, its lease held and renewed a moment ago at most
    killed = a.kill_mid_stream(body, AUTH, at="data: {", nth=5)
    r2 = httpx.post(f"{b.origin}/v1/chat/completions", json=body, headers=AUTH, timeout=60)
    waited = time.monotonic() - killed
    assert r2.status_code == 200, r2.text
    assert r2.json()["choices"][0]["message"]["content"] == "served by the other replica"
    bound = TTL + POLL_MAX_SECONDS
    figures.add(tried=1, lease_ttl_s=TTL, bound_s=bound, waited_s=round(waited, 2))
    # renewed every TTL/3, the lease had at least 2/3 of it left at the kill: honoured ...
    assert waited >= TTL * 2 / 3 - 0.5, waited
    # ... and no longer than it lasts, plus one poll
    assert waited <= bound + SLACK, waited
    assert bound <= 30
