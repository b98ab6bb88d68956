"""The builtin embedder is loaded when retrieval is on, not by the first turn that searches.

Loading wordllama's weights takes far longer than a turn waits for its query
(``timeoutMs``), so a replica that loaded them only when a question came would answer the
first question after every start without retrieval. The background worker loads them as
soon as an agent has retrieval on, whether or not it has messages to embed.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from proxy.embeddings import BuiltinEmbedder
from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import wait_until
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_events import chat, user
from tests.integration.api.test_retrieval import (
    PORT_FACT,
    _config_text,
    _embedded,
    _events,
    _plant,
    _text,
)
from tests.integration.conftest import column


def test_the_first_question_after_a_start_finds_what_was_embedded_before(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agents.json"
    path.write_text(_config_text(path, fake_upstream.url, retrieval={"timeoutMs": 100}))
    settings = Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3)
    first = ProxyServer(settings).start()
    try:
        history = _plant(first, fake_upstream, "warm", [PORT_FACT])
        stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = 'warm'")[0]
        wait_until(lambda: _embedded(db_dsn, "warm") >= stored - 1, timeout=20, what="vectors")
    finally:
        first.stop()
    loaded = threading.Event()
    load = BuiltinEmbedder.load

    def load_and_tell(self: BuiltinEmbedder) -> Any:
        weights = load(self)
        loaded.set()
        return weights

    monkeypatch.setattr(BuiltinEmbedder, "load", load_and_tell)
    second = ProxyServer(settings).start()  # a restart: nothing left to embed
    try:
        # an idle replica loads the weights with no question asked (however long that takes)
        assert loaded.wait(30), "the replica did not load the builtin model before a question"
        history.append(user("which port does the API server listen on?"))
        chat(second.origin, "warm", history)
        event = _events(db_dsn, "warm")[-1]
        assert event["error"] is None and event["hits"] >= 1, event
        assert "port 8443" in _text(fake_upstream)[-1]["content"]
    finally:
        second.stop()
