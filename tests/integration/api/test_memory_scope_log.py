"""A memory scope a limited key may not use is the 403 naming its agent to the client, and
is logged without it: the log line holds no query or body value (README, Logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, StartProxy
from tests.integration.api.limited_keys import LIMITED, client, start_with_limited_key

SECRET_TEXT = "SECRET-SCOPE-9d02ab"


def test_a_scope_a_key_may_not_use_is_logged_without_its_agent(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    records: Records,
) -> None:
    """Regression: the 403 quoted the scope's agent, a query's (``GET /v1/memory?scope=``)
    or a body's (``POST /v1/memory``), in the log line too."""
    proxy = start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch)
    scope = f"agent:{SECRET_TEXT}"
    with client(proxy.origin, LIMITED) as http:
        listed = http.get("/v1/memory", params={"scope": scope})
        added = http.post("/v1/memory", json={"scope": scope, "text": "a fact"})
    assert listed.status_code == added.status_code == 403
    assert SECRET_TEXT in added.json()["error"]["message"]  # the client sees what it sent
    records.access(2)
    logged = [r.getMessage() for r in records.errors() if r.getMessage().startswith("403 ")]
    assert len(logged) == 2 and not [line for line in logged if SECRET_TEXT in line]
    assert all("may use reviewer" in line for line in logged), logged
