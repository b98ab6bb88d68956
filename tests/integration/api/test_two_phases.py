"""The two phases through the real proxy (issue 22 item 1).

Per-turn blocks (the ``<memory>`` block, the recitation ``<plan>``) are made when a user
message begins a turn and reused byte for byte on every step of the agent's tool loop that
follows: each upstream prompt of the loop is a byte-identical prefix of the next, up to the
new messages, except the plan, which keeps its text and moves to the new tail. A fact added
mid-turn waits for the next user message, a fact deleted mid-turn leaves at the next
request; a hot reload that turns recitation off removes the plan on the very next request.
Keeping the blocks costs no statement: a step of the loop is the usual two, the turn's first
step reads the facts once more.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.cascade.types import CONFIG_RELOADED, USAGE
from proxy.settings import Settings
from proxy.store import memory, steps
from tests.fakes.replies import RecordedRequest, Reply, reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Model
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.reconcile_helpers import QueryLog, statements
from tests.integration.api.test_config_reload import named, save
from tests.integration.api.test_events import chat, open_events, user
from tests.integration.api.test_recitation import HEADERS, PLAN, plan_config

TAIL = "\n\n" + PLAN
STEPS = 10


def _config(path: Path, url: str, *, recitation: bool = True, memory_on: bool = True) -> str:
    return plan_config(
        path,
        url,
        recitation={"enabled": recitation},
        memoryPromotion={"mode": "suggest" if memory_on else "off"},
    )


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    path = tmp_path / "agents.json"
    path.write_text(_config(path, fake_upstream.url))
    return path


def _main_bodies(fake: FakeUpstream) -> list[dict[str, Any]]:
    return [b for b in fake.bodies() if b.get("model") != FAST]


def _next_call(req: RecordedRequest) -> Reply:
    """A tool call whose id counts the tool results so far: every step calls once more."""
    n = sum(m.get("role") == "tool" for m in req.json["messages"])
    return reply(None, tool_calls=[tool_call("cat", {"n": n}, id=f"c{n}")])


def _add_fact(proxy: ProxyServer, text: str) -> None:
    resp = httpx.post(f"{proxy.origin}/v1/memory", headers=HEADERS, json={"text": text})
    assert resp.status_code == 201, resp.text


def _without_plan(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    assert isinstance(content, str) and content.endswith(TAIL), content
    return {**message, "content": content[: -len(TAIL)]}


def _bytes(messages: list[dict[str, Any]]) -> list[str]:
    """Each message as the bytes it went upstream in (key order kept, nothing escaped)."""
    return [json.dumps(m, ensure_ascii=False) for m in messages]


def _summarised_session(proxy: ProxyServer, sid: str) -> list[Any]:
    """A session with a summary whose plan the fast model wrote, and a fact stored."""
    history: list[Any] = [{"role": "system", "content": "You are terse."}]
    for i in range(4):
        history.append(user(f"task part {i} " + "x" * 400))
        history.append(chat(proxy.origin, sid, history))
    resp = httpx.post(f"{proxy.origin}/v1/sessions/{sid}/compact", headers=HEADERS, timeout=10)
    assert resp.status_code == 200 and resp.json()["version"] == 1, resp.text
    _add_fact(proxy, "The port is 8443")
    return history


def test_a_tool_loop_keeps_its_prefix_and_its_blocks_until_the_next_user_message(
    proxy: ProxyServer, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    model = Model(main=_next_call)
    fake_upstream.default = model
    history = _summarised_session(proxy, "loop")
    history.append(user("now fix the parser"))
    start = len(_main_bodies(fake_upstream))
    for step in range(STEPS):
        if step == 4:
            _add_fact(proxy, "The build uses uv")  # mid-turn: waits for the next turn
        answer = chat(proxy.origin, "loop", history)
        call = answer["tool_calls"][0]["id"]
        history += [answer, {"role": "tool", "tool_call_id": call, "content": f"out {step}"}]
    loop = _main_bodies(fake_upstream)[start:]
    assert len(loop) == STEPS

    system = loop[0]["messages"][0]
    assert "- The port is 8443\n" in system["content"]
    assert "uv" not in system["content"]
    for prev, cur in zip(loop, loop[1:], strict=False):
        p, c = prev["messages"], cur["messages"]
        # everything the previous prompt sent is sent again, the same bytes, with the plan
        # gone from what was its tail...
        assert _bytes(c[: len(p)]) == _bytes([*p[:-1], _without_plan(p[-1])])
        # ...and found at the new tail, the same text; once in the prompt
        assert c[-1]["content"].endswith(TAIL) and c[-1]["role"] == "tool"
        assert sum(json.dumps(m).count("<plan>") for m in c) == 1
        assert c[0] == system

    # the next user message begins a turn: the fact added mid-turn is in its block now
    history.append(user("thanks; which build tool?"))
    chat(proxy.origin, "loop", history)
    turn = _main_bodies(fake_upstream)[-1]["messages"]
    assert "- The port is 8443\n- The build uses uv\n" in turn[0]["content"]
    assert turn[-1]["content"] == "thanks; which build tool?" + TAIL

    stored = httpx.get(f"{proxy.origin}/v1/sessions/loop/messages", headers=HEADERS, timeout=5)
    assert stored.status_code == 200
    assert "<plan>" not in stored.text and "<memory>" not in stored.text


def test_turning_recitation_off_mid_turn_removes_the_plan_on_the_next_request(
    proxy: ProxyServer, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    model = Model(main=_next_call)
    fake_upstream.default = model
    history = _summarised_session(proxy, "off")
    history.append(user("go"))
    with open_events(proxy.origin, "off") as stream:
        answer = chat(proxy.origin, "off", history)
        stream.until(named(USAGE))
        assert _main_bodies(fake_upstream)[-1]["messages"][-1]["content"] == "go" + TAIL
        save(config_path, _config(config_path, fake_upstream.url, recitation=False))
        stream.until(named(CONFIG_RELOADED))
    history += [answer, {"role": "tool", "tool_call_id": "c0", "content": "out"}]
    chat(proxy.origin, "off", history)
    sent = _main_bodies(fake_upstream)[-1]["messages"]
    assert sent[-1]["content"] == "out"
    assert not any("<plan>" in json.dumps(m) for m in sent)
    assert "- The port is 8443\n" in sent[0]["content"]  # memory's block stays for the turn


@pytest.fixture
def app_client(db_dsn: str, config_path: Path) -> Iterator[TestClient]:
    settings = Settings(database_url=db_dsn, config=config_path, watch_config=False)
    with TestClient(create_app(settings), headers=HEADERS) as c:
        yield c


def _post(c: TestClient, sid: str, messages: list[Any]) -> dict[str, Any]:
    resp = c.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": messages},
        headers={"x-session-id": sid},
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]["message"]  # type: ignore[no-any-return]


def test_the_turns_blocks_ride_in_the_steps_own_statements(
    app_client: TestClient, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.default = Model(main=_next_call)
    log = QueryLog(app_client.app_state["chat"].pool)
    app_client.app_state["chat"].pool = log
    history: list[Any] = [{"role": "system", "content": "S"}, user("start")]
    answer = _post(app_client, "stmts", history)
    # the turn's first step reads the facts once; its values go with the reply
    assert statements(log) == [steps.BEGIN_STEP, memory.SESSION_FACTS, steps.RECORD_STEP]
    record = [q for q in log.queries if q.query == steps.RECORD_STEP][0]
    kept = json.loads(record.args[13])  # memory's with the step its cap was cut at
    # recitation's with the digest of the summary its plan was made from ("": none yet)
    assert kept == {"memory": {"block": None, "step": 1}, "recitation": None, "recitation:of": ""}
    for _ in range(3):
        call = answer["tool_calls"][0]["id"]
        history += [answer, {"role": "tool", "tool_call_id": call, "content": "x"}]
        log.queries.clear()
        answer = _post(app_client, "stmts", history)
        # every step of the loop: the usual two statements, the kept values left alone
        assert statements(log) == [steps.BEGIN_STEP, steps.RECORD_STEP]
        record = [q for q in log.queries if q.query == steps.RECORD_STEP][0]
        assert record.args[12:14] == (None, None)


def test_a_suggestion_accepted_through_the_api_is_in_the_next_turns_memory_block(
    proxy: ProxyServer, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    """From outside only: promotion suggests (the fast model's extraction), a person accepts
    through the API mid-turn, and the next user message's prompt carries the fact."""
    facts = reply(json.dumps({"facts": ["The deploy target is eu-west-1"]}))
    model = Model(main=_next_call)
    fake_upstream.default = lambda req: facts if "response_format" in req.json else model(req)
    history = _summarised_session(proxy, "accept")  # the compaction suggests the fact
    history.append(user("deploy it"))
    answer = chat(proxy.origin, "accept", history)
    assert "eu-west-1" not in _main_bodies(fake_upstream)[-1]["messages"][0]["content"]

    with httpx.Client(base_url=proxy.origin, headers=HEADERS, timeout=10) as http:
        (pending,) = http.get("/v1/memory/suggestions").json()["data"]
        assert pending["facts"] == ["The deploy target is eu-west-1"]
        accepted = http.post(f"/v1/memory/suggestions/{pending['id']}/accept")
        assert accepted.status_code == 200, accepted.text
    history += [answer, {"role": "tool", "tool_call_id": "c0", "content": "planned"}]
    chat(proxy.origin, "accept", history)  # the same turn: the block stays as it was
    assert "eu-west-1" not in _main_bodies(fake_upstream)[-1]["messages"][0]["content"]

    history += [{"role": "assistant", "content": "done"}, user("where did it go?")]
    chat(proxy.origin, "accept", history)
    first = _main_bodies(fake_upstream)[-1]["messages"][0]
    assert first["role"] == "system"
    assert "- The deploy target is eu-west-1\n" in first["content"]


def test_a_fact_deleted_mid_turn_leaves_the_prompt_at_the_next_request(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A deletion clears the kept block of the turns that show the fact, so the next step
    reads the facts again (once) and sends the block without it; the steps after keep
    those bytes. A turn whose block does not show it is left alone."""
    fake_upstream.default = Model(main=_next_call)
    for text in ("The port is 8443", "The build uses uv"):
        _add_fact(proxy, text)
    history: list[Any] = [{"role": "system", "content": "S"}, user("start")]
    answer = chat(proxy.origin, "gone", history)
    assert "- The port is 8443\n" in _main_bodies(fake_upstream)[-1]["messages"][0]["content"]
    with httpx.Client(base_url=proxy.origin, headers=HEADERS, timeout=10) as http:
        facts = http.get("/v1/memory").json()["data"]
        (port,) = [f["id"] for f in facts if f["text"] == "The port is 8443"]
        assert http.delete(f"/v1/memory/{port}").status_code == 200
    sent = []
    for n in range(2):
        history += [answer, {"role": "tool", "tool_call_id": f"c{n}", "content": "x"}]
        answer = chat(proxy.origin, "gone", history)
        sent.append(_main_bodies(fake_upstream)[-1]["messages"][0]["content"])
    assert "8443" not in sent[0] and "- The build uses uv\n" in sent[0]
    assert sent[1] == sent[0]


def test_one_long_tool_loop_recites_the_plan_of_a_summary_that_lands_mid_turn(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """One user message, then only tool rounds: the turn began without a summary, so
    without renewal it never recited one; a compaction mid-turn makes the plan from then."""
    fake_upstream.default = Model(main=_next_call)
    history: list[Any] = [{"role": "system", "content": "S"}, user("start " + "x" * 400)]
    for n in range(4):
        answer = chat(proxy.origin, "one-loop", history)
        history += [answer, {"role": "tool", "tool_call_id": f"c{n}", "content": "y" * 400}]
    assert not any(PLAN in json.dumps(b) for b in _main_bodies(fake_upstream))
    resp = httpx.post(f"{proxy.origin}/v1/sessions/one-loop/compact", headers=HEADERS, timeout=10)
    assert resp.status_code == 200 and resp.json()["version"] == 1, resp.text
    for n in range(4, 6):
        answer = chat(proxy.origin, "one-loop", history)
        assert _main_bodies(fake_upstream)[-1]["messages"][-1]["content"].endswith(TAIL)
        history += [answer, {"role": "tool", "tool_call_id": f"c{n}", "content": "z"}]
