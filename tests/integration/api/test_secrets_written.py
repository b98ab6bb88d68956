"""A secret the model wrote, on the ways out of the proxy besides the summary's input.

Redaction runs on what clients send; a key the model itself wrote (its reply, a tool call's
arguments) is stored as the provider sent it. What the proxy derives from that store for a
third party is redacted with the agent's patterns all the same: the text the background
worker sends a remote embedding provider, and the ``<related_context>`` block that quotes a
folded message back into the prompt (README, Decisions: Redaction). A pattern a reload adds
covers what the proxy injects from then on: a summary stored before it, the memory facts, a
kept turn's blocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cascade.retrieval import RELATED_OPEN
from proxy.cascade.types import CONFIG_RELOADED, USAGE
from proxy.settings import Settings
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import EMBEDDINGS, FakeUpstream
from tests.integration.api.compaction_stack import FAST, Model, briefing, wait_until
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.test_config_reload import named, save
from tests.integration.api.test_events import chat, open_events, user
from tests.integration.conftest import column

HEADERS = {"authorization": "Bearer sk-test-client"}
SECRET = "sk-proj-" + "Wr1" * 12  # a default pattern's key
CODE = "ZETA-4821-QX"  # no default pattern's: one a reload adds
EMBEDDER = "text-embedding-fake"


def _config(path: Path, url: str, *, patterns: tuple[str, ...] = (), **ctx: Any) -> str:
    context = {
        "summarize": {"keepRecent": 2, "softFraction": 0.95, "hardFraction": 0.99},
        "eviction": {"enabled": False},
        "redaction": {"patterns": list(patterns)},
        **ctx,
    }
    tmp = write_config(
        path.with_name("next.json"),
        url,
        context=context,
        models={"default": {"contextLimit": 8000, "reservedOutput": 500}},
        embedding={"provider": "openai", "model": EMBEDDER},
    )
    return tmp.read_text()


@pytest.fixture
def start(tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream) -> Iterator[Any]:
    """Start a proxy on ``_config(**kwargs)``; returns it and its config's path."""
    servers: list[ProxyServer] = []

    def run(**kwargs: Any) -> tuple[ProxyServer, Path]:
        path = tmp_path / "agents.json"
        path.write_text(_config(path, fake_upstream.url, **kwargs))
        settings = Settings(
            database_url=db_dsn,
            config=path,
            keepalive_seconds=0.3,
            watch_config=True,
            embedding_poll_seconds=0.05,
        )
        servers.append(ProxyServer(settings).start())
        return servers[-1], path

    yield run
    for server in servers:
        server.stop()


def _compact(proxy: ProxyServer, sid: str) -> None:
    resp = httpx.post(f"{proxy.origin}/v1/sessions/{sid}/compact", headers=HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text


def _main(fake: FakeUpstream) -> list[dict[str, Any]]:
    return [b for b in fake.bodies() if b.get("model") != FAST]


def _embedded(dsn: str, sid: str) -> int:
    return int(
        column(
            dsn,
            "SELECT count(*) FROM message_embeddings WHERE session_id = $1 AND model = $2 "
            "AND claimed_at IS NULL",
            sid,
            EMBEDDER,
        )[0]
    )


def _folded_reply(
    proxy: ProxyServer, fake: FakeUpstream, sid: str, said: str, model: Model | None = None
) -> list[Any]:
    """A session whose early reply (the model's ``said``) a forced compaction folded."""
    model = model or Model()
    fake.default = model
    model.main = lambda req: reply(said)
    history: list[Any] = [user("Set the deploy up.")]
    history.append(chat(proxy.origin, sid, history))
    model.main = lambda req: reply("ok")
    for i in range(3):
        history.append(user(f"step {i} of the build"))
        history.append(chat(proxy.origin, sid, history))
    _compact(proxy, sid)
    return history


def test_a_written_secret_reaches_neither_the_embedder_nor_the_related_context_block(
    start: Any, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    retrieval = {"enabled": True, "minScore": -1, "maxResults": 8, "snippetChars": 400}
    proxy, _ = start(retrieval=retrieval)
    said = f"I exported OPENAI_API_KEY={SECRET} for the deploy."
    history = _folded_reply(proxy, fake_upstream, "wrote", said)
    stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = 'wrote'")[0]
    wait_until(lambda: _embedded(db_dsn, "wrote") >= stored - 1, timeout=5, what="embeddings")
    embedded = fake_upstream.bodies(EMBEDDINGS)
    assert embedded and "exported OPENAI_API_KEY=" in json.dumps(embedded)
    assert SECRET not in json.dumps(embedded)

    history.append(user("which key did you export for the deploy?"))
    chat(proxy.origin, "wrote", history)
    last = _main(fake_upstream)[-1]["messages"][-1]["content"]
    assert RELATED_OPEN in last and "I exported OPENAI_API_KEY=" in last, last
    assert SECRET not in last and "[REDACTED]" in last


def test_a_pattern_a_reload_adds_covers_the_summary_facts_and_blocks_stored_before_it(
    start: Any, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """Stored before the pattern: a summary, a memory fact, the turn's kept ``<memory>``
    and ``<related_context>`` blocks and plan. The step after the reload, in that same
    turn, sends none of them with the secret, and the session API's summary is the form
    the prompt carries."""
    ctx = {
        "memoryPromotion": {"mode": "suggest"},
        "recitation": {"enabled": True},
        "retrieval": {"enabled": True, "minScore": -1, "maxResults": 8, "snippetChars": 400},
    }
    proxy, path = start(**ctx)
    http = httpx.Client(base_url=proxy.origin, headers=HEADERS, timeout=10)
    assert http.post("/v1/memory", json={"text": f"The deploy code is {CODE}"}).status_code == 201
    written = briefing(f"deploy.sh reads {CODE}").replace("run the tests", f"type {CODE}")
    model = Model(brief=lambda req: written)
    history = _folded_reply(proxy, fake_upstream, "added", f"The code is {CODE}.", model)
    model.brief = lambda req: briefing()
    stored = column(db_dsn, "SELECT count(*) FROM messages WHERE session_id = 'added'")[0]
    wait_until(lambda: _embedded(db_dsn, "added") >= stored - 1, timeout=5, what="embeddings")
    model.main = lambda req: reply(None, tool_calls=[tool_call("ls", {}, id="c1")])
    history.append(user("what is the deploy code?"))
    history.append(chat(proxy.origin, "added", history))
    before = json.dumps(_main(fake_upstream)[-1])
    assert before.count(CODE) >= 4, before  # the summary, its plan, the fact, the recall

    with open_events(proxy.origin, "added") as stream:
        stream.until(named(USAGE))
        save(path, _config(path, fake_upstream.url, patterns=(r"ZETA-\d{4}-[A-Z]{2}",), **ctx))
        stream.until(named(CONFIG_RELOADED))
    model.main = lambda req: reply("done")
    history.append({"role": "tool", "tool_call_id": "c1", "content": "deploy.sh"})
    chat(proxy.origin, "added", history)  # the same turn: its kept blocks
    after = json.dumps(_main(fake_upstream)[-1])
    assert CODE not in after and "deploy.sh reads [REDACTED]" in after, after
    shown = http.get("/v1/sessions/added").json()["summary"]["content"]
    assert CODE not in shown and "deploy.sh reads [REDACTED]" in shown


def test_a_pattern_a_reload_adds_covers_stored_tool_results_and_their_pages(
    start: Any, fake_upstream: FakeUpstream
) -> None:
    """A tool result stored before the pattern is resent by the client and matched by its
    hash, not ingested again: the window redacts it all the same, and so does a
    ``read_tool_output`` page of its spill, which goes to the provider."""
    proxy, path = start(toolOutput={"maxChars": 1000})
    tools = [{"type": "function", "function": {"name": "sh", "parameters": {}}}]
    filler = " ".join(f"w{i}" for i in range(400))
    result = f"key {CODE}\n{filler[:1200]}\nmiddle {CODE}\n{filler}"
    model = Model()
    fake_upstream.default = model
    model.main = lambda req: reply(None, tool_calls=[tool_call("sh", {}, id="c1")])
    history: list[Any] = [user("run it")]
    history.append(chat(proxy.origin, "tools", history, tools=tools))
    history.append({"role": "tool", "tool_call_id": "c1", "content": result})
    model.main = lambda req: reply("ran")
    history.append(chat(proxy.origin, "tools", history, tools=tools))
    assert CODE in json.dumps(_main(fake_upstream)[-1])

    with open_events(proxy.origin, "tools") as stream:
        stream.until(named(USAGE))
        patterns = (r"ZETA-\d{4}-[A-Z]{2}",)
        save(
            path, _config(path, fake_upstream.url, patterns=patterns, toolOutput={"maxChars": 1000})
        )
        stream.until(named(CONFIG_RELOADED))
    read = tool_call("read_tool_output", {"id": "c1", "offset": 1100}, id="r1")
    model.main = lambda req: (
        reply("done")
        if req.json["messages"][-1].get("tool_call_id") == "r1"
        else reply(None, tool_calls=[read])
    )
    history.append(user("and the middle?"))
    chat(proxy.origin, "tools", history, tools=tools)
    asked, paged = _main(fake_upstream)[-2:]
    assert paged["messages"][-1]["tool_call_id"] == "r1" and "middle [REDACTED]" in json.dumps(
        paged
    )
    assert CODE not in json.dumps(asked) and CODE not in json.dumps(paged)


def test_the_other_ways_out_carry_a_client_secret_nowhere_and_a_written_one_to_its_owner(
    start: Any, fake_upstream: FakeUpstream, records: Any
) -> None:
    """Events carry no message text but a streamed reply's deltas, on the owner's stream;
    ``/messages`` shows the owner the reply the model wrote as it came (README, Decisions:
    Redaction); logs, metrics and the session's figures carry neither secret."""
    proxy, _ = start(toolOutput={"maxChars": 1000})
    written = "AKIA" + "WRITTENBYMODEL12"
    model = Model()
    fake_upstream.default = model
    model.main = lambda req: reply(None, tool_calls=[tool_call("sh", {"k": written}, id="c1")])
    history: list[Any] = [user(f"my key is {SECRET}")]
    history.append(chat(proxy.origin, "out", history))
    filler = " ".join(f"w{i}" for i in range(600))
    history.append({"role": "tool", "tool_call_id": "c1", "content": f"{filler}\n{SECRET}"})
    model.main = lambda req: reply(f"streamed {written}")
    with open_events(proxy.origin, "out") as stream:
        chat(proxy.origin, "out", history, stream=True)
        frames = stream.until(named(USAGE))  # the first request's, replayed
        frames += stream.until(named(USAGE))
    assert {f.event for f in frames if written in json.dumps(f.data)} == {
        "session.message.delta.appended"
    }
    persisted = column(proxy.settings.database_url, "SELECT data::text FROM events")
    assert persisted and not any(SECRET in d or written in d for d in persisted)
    http = httpx.Client(base_url=proxy.origin, headers=HEADERS, timeout=10)
    listed = http.get("/v1/sessions/out/messages").text
    assert SECRET not in listed and written in listed
    for path in ("/v1/sessions/out", "/v1/sessions", "/v1/sessions/out/tool-outputs/c1"):
        answer = http.get(path).text
        assert SECRET not in answer and written not in answer, path
    shown = [r.getMessage() for r in records.records] + [http.get("/metrics").text]
    assert not any(SECRET in t or written in t for t in shown)


def test_a_branch_into_a_deleted_sessions_id_has_its_copied_rows_scanned(
    start: Any, fake_upstream: FakeUpstream
) -> None:
    """The replica remembers a session as clean under the patterns in force; deleted and made
    again under its id by a branch, it holds rows its source stored under older patterns,
    which the first step redacts as it does any window not found clean."""
    proxy, path = start()
    fake_upstream.default = Model()
    source: list[Any] = [user(f"deploy with {CODE}")]
    source.append(chat(proxy.origin, "src", source))
    other: list[Any] = [user("nothing secret")]
    other.append(chat(proxy.origin, "dst", other))
    with open_events(proxy.origin, "dst") as stream:
        stream.until(named(USAGE))
        save(path, _config(path, fake_upstream.url, patterns=(r"ZETA-\d{4}-[A-Z]{2}",)))
        stream.until(named(CONFIG_RELOADED))
    chat(proxy.origin, "dst", [*other, user("still nothing")])  # found clean now
    with httpx.Client(base_url=proxy.origin, headers=HEADERS, timeout=10) as http:
        assert http.delete("/v1/sessions/dst").status_code == 200
        assert http.post("/v1/sessions/src/branch", json={"id": "dst"}).status_code == 200
    chat(proxy.origin, "dst", [*source, user("go on")])
    sent = json.dumps(_main(fake_upstream)[-1]["messages"])
    assert CODE not in sent and "deploy with [REDACTED]" in sent
