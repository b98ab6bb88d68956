"""Semantic retrieval through the real proxy (issue 22 items 3 and 4).

A session has facts planted early (a file path, a port, a decision) and a tool result that
eviction clears; a forced compaction folds them into a summary that does not hold them. The
background worker embeds the stored messages with the builtin model; a later question about
one fact brings it back in a ``<related_context>`` block on that question as the fake
provider receives it, and a fact of another session never appears. A hot reload that turns
retrieval off removes the block on the next request; a dead or hanging embedding provider
leaves every request answered, with the error in the ``context.retrieval`` event; a change
of embedding model never searches the old model's vectors.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy import app as app_module
from proxy.cascade.retrieval import RELATED_OPEN
from proxy.cascade.types import CONFIG_RELOADED, RETRIEVAL, USAGE
from proxy.services.retrieval import EmbeddingWorker
from proxy.settings import Settings
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Model, wait_until
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.test_config_reload import named, save
from tests.integration.api.test_events import chat, open_events, user
from tests.integration.api.test_metrics import scrape
from tests.integration.conftest import column

HEADERS = {"authorization": "Bearer sk-test-client"}
PATH_FACT = "Remember: the proxy's config file lives at /etc/cascade/agents.json."
PORT_FACT = "Note: the API server listens on port 8443."
DECISION = "Decision: we store sessions in PostgreSQL with pgvector, not SQLite."
OTHER_FACT = "For this other project the API server listens on port 9999."


def _text(fake: FakeUpstream) -> list[Any]:
    return [b for b in fake.bodies() if b.get("model") != FAST][-1]["messages"]  # type: ignore[no-any-return]


def _config_text(path: Path, url: str, **over: Any) -> str:
    retrieval = {"enabled": True, "minScore": 0.35, "maxResults": 3, "snippetChars": 300}
    retrieval.update(over.pop("retrieval", {}))
    ctx = {
        "summarize": {"keepRecent": 2, "softFraction": 0.95, "hardFraction": 0.99},
        "eviction": {
            "atFraction": 0.3,
            "keepRecentRounds": 1,
            "clearAtLeast": 300,
            "minResultTokens": 100,
        },
        "retrieval": retrieval,
    }
    tmp = write_config(
        path.with_name("next.json"),
        url,
        context=ctx,
        models={"default": {"contextLimit": 8000, "reservedOutput": 500}},
        **over,
    )
    return tmp.read_text()


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    path = tmp_path / "agents.json"
    path.write_text(_config_text(path, fake_upstream.url))
    return path


@pytest.fixture
def proxy(db_dsn: str, config_path: Path) -> Iterator[ProxyServer]:
    settings = Settings(
        database_url=db_dsn, config=config_path, keepalive_seconds=0.3, watch_config=True
    )
    server = ProxyServer(settings).start()
    yield server
    server.stop()


def _compact(proxy: ProxyServer, sid: str) -> None:
    resp = httpx.post(f"{proxy.origin}/v1/sessions/{sid}/compact", headers=HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text


def _embedded(dsn: str, sid: str, model: str = "wordllama-l2-256") -> int:
    return int(
        column(
            dsn,
            "SELECT count(*) FROM message_embeddings WHERE session_id = $1 AND model = $2 "
            "AND embedding IS NOT NULL",
            sid,
            model,
        )[0]
    )


def _events(dsn: str, sid: str) -> list[dict[str, Any]]:
    rows = column(
        dsn, "SELECT data FROM events WHERE session_id = $1 AND name = $2 ORDER BY id", sid,
        RETRIEVAL,
    )  # fmt: skip
    return [json.loads(r) if isinstance(r, str) else r for r in rows]


def _plant(proxy: ProxyServer, fake: FakeUpstream, sid: str, facts: list[str]) -> list[Any]:
    """The facts, then tool rounds whose large results eviction clears, then a compaction."""
    model = Model()
    fake.default = model
    history: list[Any] = []
    for fact in facts:
        history.append(user(fact))
        history.append(chat(proxy.origin, sid, history))
    history.append(user("now build the project"))
    for i in range(6):
        call = tool_call("sh", {"n": i}, id=f"c{i}")
        model.main = lambda req, call=call: reply(None, tool_calls=[call])
        history.append(chat(proxy.origin, sid, history))
        log = "\n".join(f"step {i}.{j}: compiling module_{j}.c ... done" for j in range(60))
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": log})
    model.main = lambda req: reply("built")
    history.append(chat(proxy.origin, sid, history))
    _compact(proxy, sid)
    return history


def test_a_planted_fact_comes_back_for_a_later_question_and_only_from_its_session(
    proxy: ProxyServer, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    _plant(proxy, fake_upstream, "other", [OTHER_FACT])
    history = _plant(proxy, fake_upstream, "ret", [PATH_FACT, PORT_FACT, DECISION])
    evicted = column(db_dsn, "SELECT count(*) FROM messages WHERE placeholder IS NOT NULL")[0]
    assert evicted > 0, "the tool results were evicted"
    stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = 'ret'")[0]
    wait_until(lambda: _embedded(db_dsn, "ret") >= stored - 1, timeout=20, what="embeddings")

    for question, fact, absent in (
        ("which port does the API server listen on?", "port 8443", "9999"),
        ("where is the config file?", "/etc/cascade/agents.json", "9999"),
        ("which database did we decide to use for storage?", "PostgreSQL", "9999"),
    ):
        history.append(user(question))
        history.append(chat(proxy.origin, "ret", history))
        last = _text(fake_upstream)[-1]
        assert last["role"] == "user" and last["content"].startswith(question + "\n\n")
        block = last["content"][len(question) + 2 :]
        assert block.startswith(RELATED_OPEN) and fact in block, block
        assert absent not in json.dumps(_text(fake_upstream))
    events = _events(db_dsn, "ret")[-3:]  # the questions' (each planted fact was a turn too)
    assert all(e["hits"] >= 1 and e["error"] is None for e in events)
    assert all(e["best_score"] >= 0.35 and e["took_ms"] >= 0 for e in events)
    # the block is never stored as the client's message
    listed = httpx.get(f"{proxy.origin}/v1/sessions/ret/messages", headers=HEADERS, timeout=5)
    assert RELATED_OPEN not in listed.text


def test_a_text_repeated_in_the_folded_history_is_quoted_once(
    proxy: ProxyServer, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """Agents repeat themselves (a question asked again, a tool's same output): copies of one
    text would spend the block's room and crowd out the other hits."""
    history = _plant(proxy, fake_upstream, "dup", [PORT_FACT, PORT_FACT, PORT_FACT, PATH_FACT])
    stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = 'dup'")[0]
    wait_until(lambda: _embedded(db_dsn, "dup") >= stored - 1, timeout=20, what="embeddings")
    history.append(user("which port does the API server listen on?"))
    chat(proxy.origin, "dup", history)
    block = _text(fake_upstream)[-1]["content"]
    assert block.count(PORT_FACT) == 1, block


def test_a_text_the_prompt_still_carries_is_not_quoted_again(
    proxy: ProxyServer, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """A question asked again matches its folded first asking best: quoting it would put
    the message the prompt ends with back in beside it, in a hit's place."""
    question = "which port does the API server listen on?"
    history = _plant(proxy, fake_upstream, "again", [question, PORT_FACT])
    stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = 'again'")[0]
    wait_until(lambda: _embedded(db_dsn, "again") >= stored - 1, timeout=20, what="embeddings")
    history.append(user(question))
    chat(proxy.origin, "again", history)
    block = _text(fake_upstream)[-1]["content"]
    assert block.count(question) == 1 and PORT_FACT in block, block


def test_a_step_inside_the_turn_searches_nothing(
    proxy: ProxyServer, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    history = _plant(proxy, fake_upstream, "loop", [PORT_FACT])
    before = len(_events(db_dsn, "loop"))
    history.append(user("which port does the API server listen on?"))
    fake_upstream.default = reply(None, tool_calls=[tool_call("sh", {}, id="x1")])
    history.append(chat(proxy.origin, "loop", history))
    history.append({"role": "tool", "tool_call_id": "x1", "content": "ok"})
    fake_upstream.default = reply("done")
    chat(proxy.origin, "loop", history)
    assert len(_events(db_dsn, "loop")) == before + 1  # the new turn only


def test_a_turns_block_rides_in_that_turn_only(
    proxy: ProxyServer, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The next turn sends the earlier question as the client sent it: one block a prompt,
    the new turn's (README, Decisions: Retrieval)."""
    history = _plant(proxy, fake_upstream, "turns", [PORT_FACT, PATH_FACT])
    stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = 'turns'")[0]
    wait_until(lambda: _embedded(db_dsn, "turns") >= stored - 1, timeout=20, what="embeddings")
    first, second = "which port does the API server listen on?", "where is the config file?"
    history.append(user(first))
    history.append(chat(proxy.origin, "turns", history))
    assert _text(fake_upstream)[-1]["content"].startswith(f"{first}\n\n{RELATED_OPEN}")
    history.append(user(second))
    history.append(chat(proxy.origin, "turns", history))
    prompt = _text(fake_upstream)
    assert user(first) in prompt
    assert prompt[-1]["content"].startswith(f"{second}\n\n{RELATED_OPEN}")
    assert json.dumps(prompt).count(RELATED_OPEN) == 1


def test_turning_retrieval_off_removes_the_block_on_the_next_request(
    proxy: ProxyServer, db_dsn: str, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    history = _plant(proxy, fake_upstream, "off", [PORT_FACT])
    wait_until(lambda: _embedded(db_dsn, "off") >= 3, timeout=20, what="embeddings")
    history.append(user("which port does the API server listen on?"))
    history.append(chat(proxy.origin, "off", history))
    assert RELATED_OPEN in _text(fake_upstream)[-1]["content"]
    with open_events(proxy.origin, "off") as stream:
        stream.until(named(USAGE))
        text = _config_text(config_path, fake_upstream.url, retrieval={"enabled": False})
        save(config_path, text)
        stream.until(named(CONFIG_RELOADED))
    history.append(user("and which port again?"))
    chat(proxy.origin, "off", history)
    assert _text(fake_upstream)[-1] == {"role": "user", "content": "and which port again?"}


@pytest.fixture
def hanging_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@pytest.mark.parametrize("kind", ["dead", "hanging"])
def test_with_the_embedding_service_down_every_request_succeeds(
    kind: str,
    tmp_path: Path,
    db_dsn: str,
    fake_upstream: FakeUpstream,
    hanging_port: int,
) -> None:
    if kind == "dead":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # closed again: nothing listens there
    else:
        port = hanging_port
    path = tmp_path / "agents.json"
    emb = {"baseUrl": f"http://127.0.0.1:{port}/v1", "timeoutSeconds": 5}
    path.write_text(_config_text(path, fake_upstream.url, retrieval={"timeoutMs": 200}))
    raw = json.loads(path.read_text())
    raw["providers"]["emb"] = emb
    raw["embedding"] = {"provider": "emb", "model": "text-embedding-3-small"}
    path.write_text(json.dumps(raw))
    settings = Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3)
    server = ProxyServer(settings).start()
    try:
        fake_upstream.default = reply("ok")
        history: list[Any] = []
        for i in range(4):
            history.append(user(f"question {i} about port 8443"))
            history.append(chat(server.origin, "down", history))
        assert scrape(server.origin).value("cascade_embedding_failures_total") >= 4
    finally:
        server.stop()
    events = _events(db_dsn, "down")
    assert len(events) == 4 and all(e["hits"] == 0 and e["error"] for e in events)
    if kind == "hanging":
        assert all("longer than 200 ms" in e["error"] for e in events)
        assert all(e["took_ms"] < 2000 for e in events)


def test_a_new_model_never_searches_the_old_models_vectors(
    proxy: ProxyServer, db_dsn: str, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    history = _plant(proxy, fake_upstream, "swap", [PORT_FACT, DECISION])
    stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = 'swap'")[0]
    wait_until(lambda: _embedded(db_dsn, "swap") >= stored - 1, timeout=20, what="embeddings")

    raw = json.loads(_config_text(config_path, fake_upstream.url, retrieval={"minScore": -1}))
    raw["embedding"] = {"provider": "openai", "model": "text-embedding-fake"}
    with open_events(proxy.origin, "swap") as stream:
        save(config_path, json.dumps(raw))
        stream.until(named(CONFIG_RELOADED))
    history.append(user("which port does the API server listen on?"))
    history.append(chat(proxy.origin, "swap", history))
    wait_until(
        lambda: _embedded(db_dsn, "swap", "text-embedding-fake") >= stored,
        timeout=20,
        what="the new model's embeddings",
    )
    history.append(user("and the database?"))
    chat(proxy.origin, "swap", history)
    first, second = _events(db_dsn, "swap")[-2:]
    # a search over mixed vectors would fail on their dimensions (8 against 256)
    assert first["model"] == second["model"] == "text-embedding-fake"
    assert first["error"] is None and second["error"] is None and second["hits"] > 0
    dims = column(
        db_dsn,
        "SELECT DISTINCT model || ':' || dim FROM message_embeddings "
        "WHERE session_id = 'swap' AND embedding IS NOT NULL ORDER BY 1",
    )
    assert dims == ["text-embedding-fake:8", "wordllama-l2-256:256"]


def test_turning_retrieval_on_backfills_a_session_stored_without_it(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    path = tmp_path / "agents.json"
    path.write_text(_config_text(path, fake_upstream.url, retrieval={"enabled": False}))
    settings = Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3, watch_config=True)
    proxy = ProxyServer(settings).start()
    try:
        history = _plant(proxy, fake_upstream, "late", [PORT_FACT])
        assert _embedded(db_dsn, "late") == 0, "nothing is embedded while retrieval is off"
        with open_events(proxy.origin, "late") as stream:
            stream.until(named(USAGE))
            save(path, _config_text(path, fake_upstream.url))
            stream.until(named(CONFIG_RELOADED))
        stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = 'late'")[0]
        wait_until(lambda: _embedded(db_dsn, "late") >= stored - 1, timeout=20, what="backfill")
        history.append(user("which port does the API server listen on?"))
        chat(proxy.origin, "late", history)
        assert "port 8443" in _text(fake_upstream)[-1]["content"]
    finally:
        proxy.stop()


def test_the_embedder_polls_as_often_as_configured(
    start_proxy: Any, config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CASCADE_EMBEDDING_POLL_SECONDS`` reaches the replica's background embedder (the
    replay bench shortens it; without the setting the worker always polls every second)."""
    polls: list[float] = []

    class Recorded(EmbeddingWorker):
        def start(self) -> None:
            polls.append(self.idle_seconds)
            super().start()

    monkeypatch.setattr(app_module, "EmbeddingWorker", Recorded)
    monkeypatch.setenv("CASCADE_EMBEDDING_POLL_SECONDS", "0.05")
    start_proxy(config_path)  # Settings reads the environment
    assert polls == [0.05]
