"""The WARNING of a 502 for a provider that refused the connection names the refusal as its
cause (README: Logs, ``(cause: ConnectionRefusedError: …)``), not the ``ConnectTimeout`` the
transport wraps every connection failure in: an operator reading the log looked for a slow
network when the provider was simply down."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.integration.api.conftest import Records, StartProxy, write_config
from tests.integration.api.errors_helpers import _closed_port


def test_a_refused_connection_is_logged_as_refused(
    start_proxy: StartProxy, tmp_path: Path, records: Records
) -> None:
    port = _closed_port()
    proxy = start_proxy(write_config(tmp_path / "down.json", f"http://127.0.0.1:{port}/v1"))
    resp = httpx.post(
        f"{proxy.origin}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": "Bearer sk-test-client", "x-session-id": "down"},
        timeout=10,
    )
    assert resp.status_code == 502
    records.access(1)
    (line,) = [r.getMessage() for r in records.errors() if r.getMessage().startswith("502 ")]
    assert "ConnectionRefusedError" in line, line
    assert "ConnectTimeout" not in line, line
