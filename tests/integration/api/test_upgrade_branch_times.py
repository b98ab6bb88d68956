"""A branch made before 5983479 keeps its parent's write times once migration 0026 has run.

Until 5983479 a branch's copy stamped every row and spill it copied with the time of the
branch. A read by bare tool call id tells by those times whether the id's newest result is
its spill or its row (``store/raw_outputs.py``), so in such a branch a reused id (``call_0``
every turn) whose newest result was kept whole read an older result's spill instead. The
test branches with today's copy, stamps the branch's rows and spills as the old copy did,
and runs migration 0026 over it as the upgrade does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.store.migrations import MIGRATIONS_DIR
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import chat, history
from tests.integration.conftest import execute, run_sync
from tests.integration.transcripts import api, blob, read_all

OLD_COPY = [
    """UPDATE messages m SET created_at = s.created_at FROM sessions s
       WHERE s.id = 'cut-branch' AND m.session_id = s.id""",
    """UPDATE tool_raw_outputs r SET created_at = s.created_at FROM sessions s
       WHERE s.id = 'cut-branch' AND r.session_id = s.id""",
]


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    models = {"default": {"contextLimit": 8000, "reservedOutput": 500}}
    context = {"toolOutput": {"maxChars": 2000}, "summarize": {"enabled": False}}
    return write_config(tmp_path / "agents.json", fake_upstream.url, models=models, context=context)


def test_an_old_branch_reads_its_reused_ids_newest_result(proxy: ProxyServer, db_dsn: str) -> None:
    first, second = blob(9000, "old"), "turn two's short output"
    messages = history("call_0", first, tag="a")  # cut and spilled
    chat(proxy, "cut", messages)
    messages += [{"role": "assistant", "content": "ok"}, *history("call_0", second, tag="b")]
    chat(proxy, "cut", messages)  # kept whole: the row is the newest result
    with api(proxy) as http:
        assert http.post("/v1/sessions/cut/branch", json={"id": "cut-branch"}).status_code == 200
    run_sync(execute(db_dsn, *OLD_COPY))

    (repair,) = MIGRATIONS_DIR.glob("0026_*.sql")
    run_sync(execute(db_dsn, repair.read_text(encoding="utf-8")))

    with api(proxy) as http:
        assert read_all(http, "cut-branch", "call_0") == second
        assert read_all(http, "cut", "call_0") == second
        sent = http.get("/v1/sessions/cut-branch/messages", params={"form": "sent"}).json()
    assert [r["message"].get("content") for r in sent["data"]][2::4] == [first, second]
