"""A tool-calling agent through the proxy, every stage on at a small window, against a provider
that refuses what OpenAI refuses (``tests/fakes/strict_openai.py``).

Each turn the model calls three tools at once, reads a cut result back with
``read_tool_output`` in a round of its own, then calls it again beside a call of the client's;
the big results are cut, evicted and summarised, the summary's plan recited, a memory fact and
retrieval ride along; the session is branched and reset on the way. Every request the
provider gets must pass its checks, offer ``read_tool_output`` once, after the client's own
tools, and carry no field of the proxy's; the client gets its parallel calls in the model's
order, without the proxy's, and every call it answers is paired with its result upstream.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import RecordedRequest, Reply, reply, tool_call
from tests.fakes.strict_openai import violations
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import CLIENT_KEY, Model, Stack, briefing, stack
from tests.integration.api.strict_provider import png_data_url
from tests.integration.transcripts import blob

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} a path",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for name in ("read_file", "grep", "list_dir")
]
CONTEXT = {
    "toolOutput": {"maxChars": 1500},
    "eviction": {"enabled": True, "atFraction": 0.1, "clearAtLeast": 200, "minResultTokens": 50},
    "recitation": {"enabled": True},
    "memoryPromotion": {"mode": "suggest"},
    "retrieval": {"enabled": True, "timeoutMs": 300},
}


class Script:
    """The model: per turn, three calls at once; then a read-back round; then a read-back
    beside one more client call; then text. It reads the turn's place from the request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.turn = 0

    def __call__(self, req: RecordedRequest) -> Reply:
        messages = req.json["messages"]
        last = messages[-1]
        with self.lock:
            if last["role"] == "user":
                self.turn += 1
            t = self.turn
        if last["role"] == "user":
            calls = [
                tool_call(name, {"path": f"t{t}/{name}"}, id=f"c{t}_{name}")
                for name in ("read_file", "grep", "list_dir")
            ]
            return reply(f"turn {t}: looking", tool_calls=calls)
        if last["role"] == "tool" and last["tool_call_id"] == f"c{t}_list_dir":
            return reply(None, tool_calls=[_read(f"c{t}_read_file", f"r{t}a")])
        if last["role"] == "tool" and last["tool_call_id"] == f"r{t}a":
            more = tool_call("read_file", {"path": f"t{t}/more"}, id=f"c{t}_more")
            return reply(None, tool_calls=[_read(f"c{t}_grep", f"r{t}b"), more])
        return reply(f"turn {t} done", usage=(100, 5))


def _read(target: str, call_id: str) -> dict[str, Any]:
    return tool_call("read_tool_output", {"id": target, "limit": 300}, id=call_id)


def _run_turn(s: Stack, sid: str, history: list[Any], text: str) -> list[list[str]]:
    """One user turn, the client running its tools until the model answers in text; the ids
    of the calls the client got, per step."""
    client = s.client(sid)
    history.append({"role": "user", "content": text})
    got: list[list[str]] = []
    for _ in range(6):
        out = client.chat.completions.create(model="gpt-fake", messages=history, tools=TOOLS)
        message = out.choices[0].message.model_dump(exclude_none=True)
        history.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            return got
        got.append([c["id"] for c in calls])
        for c in calls:
            output = blob(5000, c["id"].replace("_", ""))
            history.append({"role": "tool", "tool_call_id": c["id"], "content": output})
    raise AssertionError("the model never answered in text")


def _post(s: Stack, path: str, body: Any = None) -> None:
    resp = httpx.post(
        f"{s.proxy.origin}{path}",
        json=body,
        headers={"authorization": f"Bearer {CLIENT_KEY}"},
        timeout=10,
    )
    assert resp.status_code in (200, 201), resp.text


def _check_bodies(fake: FakeUpstream) -> None:
    for body in fake.bodies():
        names = [t["function"]["name"] for t in body.get("tools") or []]
        if names and names != [t["function"]["name"] for t in TOOLS]:
            assert names == [*(t["function"]["name"] for t in TOOLS), "read_tool_output"], names
        for m in body["messages"]:
            for call in m.get("tool_calls") or ():
                assert (call["function"]["name"] == "read_tool_output") == call["id"].startswith(
                    "r"
                ), call


def test_every_request_of_a_long_tool_loop_passes_a_strict_provider(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.validator = violations
    model = Model(main=Script(), brief=lambda req: briefing("- t1/read_file"))
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        model,
        limit=8000,
        reserved=1000,
        summarize={"softFraction": 0.4, "keepRecent": 4},
        context=CONTEXT,
    ) as s:
        _post(s, "/v1/memory", {"scope": "global", "text": "The tests run with pytest."})
        history: list[Any] = [{"role": "system", "content": "You are a coding agent."}]
        for t in range(1, 4):
            got = _run_turn(s, "main", history, f"turn {t}: fix the parser, part {t}")
            assert got == [
                [f"c{t}_read_file", f"c{t}_grep", f"c{t}_list_dir"],
                [f"c{t}_more"],
            ]
            s.replied("main")
        _post(s, "/v1/sessions/main/compact")
        _post(s, "/v1/sessions/main/branch", {"id": "branch"})
        branch = list(history)
        _run_turn(s, "branch", branch, "turn 4: on the branch")
        _post(s, "/v1/sessions/main/reset")
        _run_turn(s, "main", history, "turn 4: after the reset")
        _run_turn(s, "main", history, "turn 5: once more")
        names = {e["name"] for e in s.events("main") + s.events("branch")}
        assert {"context.truncated", "context.retrieval"} <= names, names
    assert fake_upstream.violations == [], fake_upstream.violations[:3]
    _check_bodies(fake_upstream)
    assert any("<plan>" in json.dumps(b) for b in s.main_bodies())
    assert any("<memory>" in json.dumps(b) for b in s.main_bodies())
    assert any("[context-cleared]" in json.dumps(b) for b in s.main_bodies())


def _parallel(req: RecordedRequest) -> Reply:
    """Three calls at once for a user message, text once they are answered."""
    last = req.json["messages"][-1]
    if last["role"] != "user":
        return reply("done", usage=(100, 5))
    n = sum(m["role"] == "user" for m in req.json["messages"])
    names = ("read_file", "grep", "list_dir")
    return reply(None, tool_calls=[tool_call(x, {"path": x}, id=f"c{n}_{x}") for x in names])


def test_the_guard_drops_parallel_rounds_whole_for_a_strict_provider(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.validator = violations
    context = {"toolOutput": {"maxChars": 8000}, "eviction": {"enabled": False}}
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        Model(main=_parallel),
        limit=4000,
        reserved=500,
        summarize={"enabled": False},
        context=context,
    ) as s:
        history: list[Any] = [{"role": "system", "content": "You are a coding agent."}]
        client = s.client("guard")
        for t in range(6):
            history.append({"role": "user", "content": f"turn {t}"})
            for _ in range(2):
                out = client.chat.completions.create(
                    model="gpt-fake", messages=history, tools=TOOLS, max_tokens=400
                )
                message = out.choices[0].message.model_dump(exclude_none=True)
                history.append(message)
                for c in message.get("tool_calls") or ():
                    text = blob(1400, c["id"].replace("_", ""))
                    history.append({"role": "tool", "tool_call_id": c["id"], "content": text})
        assert s.events("guard", "context.trimmed")
    assert fake_upstream.violations == [], fake_upstream.violations[:3]


@pytest.mark.parametrize("keep", [1, 2, 3, 5])
def test_a_summary_cut_inside_a_parallel_round_keeps_the_round_whole(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, keep: int
) -> None:
    fake_upstream.validator = violations
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        Model(main=_parallel),
        limit=32000,
        summarize={"keepRecent": keep},
        context={"eviction": {"enabled": False}},
    ) as s:
        client = s.client("cut")
        history: list[Any] = [{"role": "system", "content": "You are a coding agent."}]
        for t in range(3):
            history.append({"role": "user", "content": f"turn {t} " + "words " * 200})
            for _ in range(2):
                out = client.chat.completions.create(
                    model="gpt-fake", messages=history, tools=TOOLS
                )
                message = out.choices[0].message.model_dump(exclude_none=True)
                history.append(message)
                for c in message.get("tool_calls") or ():
                    history.append({"role": "tool", "tool_call_id": c["id"], "content": "x" * 900})
                if t == 2 and message.get("tool_calls"):
                    s.replied("cut")
                    _post(s, "/v1/sessions/cut/compact")
        assert s.summaries("cut")
    assert fake_upstream.violations == [], fake_upstream.violations[:3]


def _parts(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def test_content_sent_as_parts_stays_valid_through_every_stage(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.validator = violations
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        Model(main=_parallel),
        limit=8000,
        reserved=1000,
        summarize={"softFraction": 0.4, "keepRecent": 2},
        context=CONTEXT,
    ) as s:
        _post(s, "/v1/memory", {"scope": "global", "text": "The tests run with pytest."})
        client = s.client("parts")
        history: list[Any] = [{"role": "system", "content": _parts("You are a coding agent.")}]
        for t in range(5):
            image = {"type": "image_url", "image_url": {"url": png_data_url(64, 64)}}
            history.append({"role": "user", "content": [*_parts(f"turn {t}"), image]})
            for _ in range(2):
                out = client.chat.completions.create(
                    model="gpt-fake", messages=history, tools=TOOLS
                )
                message = out.choices[0].message.model_dump(exclude_none=True)
                history.append(message)
                for c in message.get("tool_calls") or ():
                    text = _parts(blob(2500, c["id"].replace("_", "")))
                    history.append({"role": "tool", "tool_call_id": c["id"], "content": text})
            s.replied("parts")
            if t == 2:
                _post(s, "/v1/sessions/parts/compact")
        assert s.summaries("parts")
    assert fake_upstream.violations == [], fake_upstream.violations[:3]
    assert any("<plan>" in json.dumps(b) for b in s.main_bodies())


def test_a_compact_command_inside_a_tool_loop_leaves_a_valid_prompt(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.validator = violations
    with stack(tmp_path, db_dsn, fake_upstream, Model(main=_parallel), limit=32000) as s:
        client = s.client("cmd")
        history: list[Any] = [{"role": "system", "content": "You are a coding agent."}]
        for text in ("look around " + "words " * 300, "/compact", "go on " + "words " * 300):
            history.append({"role": "user", "content": text})
            for _ in range(2):
                out = client.chat.completions.create(
                    model="gpt-fake", messages=history, tools=TOOLS
                )
                message = out.choices[0].message.model_dump(exclude_none=True)
                history.append(message)
                for c in message.get("tool_calls") or ():
                    history.append({"role": "tool", "tool_call_id": c["id"], "content": "x" * 900})
                if not message.get("tool_calls"):
                    break
        assert s.summaries("cmd")
    assert fake_upstream.violations == [], fake_upstream.violations[:3]
