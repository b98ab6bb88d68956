"""Retrieval never brings a ``/compact`` exchange back into a prompt.

The proxy answers a chat message that is exactly ``/compact`` itself; the exchange is kept in
the history but left out of every prompt (README, Decisions). Once a compaction folds it,
it is outside the prompt like any folded message, so a search that could find it would quote
the command and the proxy's ``[cascade] Compacted …`` reply in a ``<related_context>``
block: the exchange back in the prompt, as text the model never wrote.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cascade.commands import COMMAND_REPLY_PREFIX, COMPACT_COMMAND
from proxy.cascade.retrieval import RELATED_OPEN
from proxy.cascade.types import RETRIEVAL
from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Model, wait_until
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.test_events import chat, user
from tests.integration.conftest import column

HEADERS = {"authorization": "Bearer sk-test-client"}


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    ctx = {
        "summarize": {"keepRecent": 2, "softFraction": 0.95, "hardFraction": 0.99},
        # every embedded message outside the prompt is a hit: what is found is what exists
        "retrieval": {"enabled": True, "minScore": -1, "maxResults": 50, "timeoutMs": 10_000},
    }
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)


@pytest.fixture
def proxy(db_dsn: str, config_path: Path) -> Iterator[ProxyServer]:
    settings = Settings(database_url=db_dsn, config=config_path, keepalive_seconds=0.3)
    server = ProxyServer(settings).start()
    yield server
    server.stop()


def _settled(dsn: str, sid: str) -> bool:
    """Every stored non-system message has had its turn with the embedder."""
    stored = column(
        dsn, "SELECT count(*) FROM messages WHERE session_id = $1 AND role <> 'system'", sid
    )[0]
    done = column(
        dsn,
        "SELECT count(*) FROM message_embeddings WHERE session_id = $1 AND claimed_at IS NULL",
        sid,
    )[0]
    return bool(done >= stored)


def test_a_folded_compact_exchange_is_never_quoted_by_retrieval(
    proxy: ProxyServer, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.default = Model()
    sid = "cmd"
    history: list[Any] = [{"role": "system", "content": "S"}]
    for text in ("the deploy script is deploy.sh", "the tests run with pytest"):
        history.append(user(text))
        history.append(chat(proxy.origin, sid, history))
    history.append(user(COMPACT_COMMAND))
    answer = chat(proxy.origin, sid, history)
    assert answer["content"].startswith(COMMAND_REPLY_PREFIX)
    history.append(answer)
    for text in ("the compacted summary lists the prompt tokens", "messages about compaction"):
        history.append(user(text))
        history.append(chat(proxy.origin, sid, history))
    resp = httpx.post(f"{proxy.origin}/v1/sessions/{sid}/compact", headers=HEADERS, timeout=10)
    assert resp.status_code == 200 and resp.json()["boundary"] > 6, resp.text
    wait_until(lambda: _settled(db_dsn, sid), timeout=20, what="embeddings")

    history.append(user("how many messages were compacted into the summary, and which tokens?"))
    chat(proxy.origin, sid, history)
    sent = [b for b in fake_upstream.bodies() if b.get("model") != FAST][-1]["messages"]
    block = sent[-1]["content"]
    assert RELATED_OPEN in block, "the folded messages are found"
    assert "deploy.sh" in block
    assert COMPACT_COMMAND not in block and COMMAND_REPLY_PREFIX not in block, block


def test_a_compact_command_searches_nothing_and_reports_no_retrieval(
    proxy: ProxyServer, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """``/compact`` is answered by the proxy and no model reads its prompt: embedding the
    command and searching would cost the turn's wait and put a ``context.retrieval`` event
    for a question nobody asked on the session's stream."""
    fake_upstream.default = Model()
    sid = "cmd-search"
    history: list[Any] = [{"role": "system", "content": "S"}, user("the script is deploy.sh")]
    history.append(chat(proxy.origin, sid, history))
    searches = f"SELECT count(*) FROM events WHERE session_id = '{sid}' AND name = $1"
    assert column(db_dsn, searches, RETRIEVAL) == [1]  # the user's turn searched
    history.append(user(COMPACT_COMMAND))
    assert chat(proxy.origin, sid, history)["content"].startswith(COMMAND_REPLY_PREFIX)
    assert column(db_dsn, searches, RETRIEVAL) == [1]
