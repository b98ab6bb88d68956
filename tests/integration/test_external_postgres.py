"""The proxy needs nothing from the embedded server: a separately started PostgreSQL over TCP.

We start a second, independent PostgreSQL (its own data directory, its own postmaster, a TCP
port, password auth) from the same binaries, point ``DATABASE_URL`` at it, and drive a chat
through the proxy. The schema is created by the proxy's own migrations on first start.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from proxy.settings import Settings
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.conftest import column
from tests.integration.external_pg import external_postgres


@pytest.fixture(scope="module")
def external_pg() -> Iterator[str]:
    with external_postgres() as dsn:
        yield dsn


def test_proxy_runs_on_a_separately_started_postgres(
    external_pg: str, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    fake_upstream.script(reply("from the external database"))
    server = ProxyServer(
        Settings(database_url=external_pg, config=config, watch_config=False)
    ).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="sk-ext", max_retries=0)
        out = client.chat.completions.with_raw_response.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Session-Id": "ext-1"},
        )
        assert out.parse().choices[0].message.content == "from the external database"
    finally:
        server.stop()

    stored = "SELECT role FROM messages WHERE session_id = 'ext-1' ORDER BY pos"
    assert column(external_pg, stored) == ["user", "assistant"]
