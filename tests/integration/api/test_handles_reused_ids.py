"""Regression: a cut or cleared result's handle led the model to another result when the
client reused its tool call ids. Some clients number their calls ``call_0`` every turn; the
truncation marker and the eviction placeholder named the bare id, and ``read_tool_output``
(and the tool-outputs API) read that id's newest result: an older result's marker, frozen
when it was written, then read back a newer result's text, silently. Each now names its
result's pinned handle (``pins.pin``: ``call_0@<position>``), which reads that result's own
bytes: cut (its spill, capped or not), evicted (its body), in a branch too; the bare id still
reads the newest result."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import chat, history, read_call
from tests.integration.e2e_checks import Listener
from tests.integration.transcripts import api, blob, marker_args, page_slice, read_all

MAX_CHARS = 2000
RAW_CAP = 20_000
PLACEHOLDER = "[context-cleared]"
USER = {"role": "user", "content": "read the older output again"}


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    models = {"default": {"contextLimit": 8000, "reservedOutput": 500}}
    context = {
        "toolOutput": {"maxChars": MAX_CHARS, "rawCapBytes": RAW_CAP},
        "eviction": {
            "enabled": True,
            "atFraction": 0.5,
            "keepRecentRounds": 2,
            "clearAtLeast": 300,
            "minResultTokens": 100,
        },
        "summarize": {"enabled": False},
    }
    return write_config(tmp_path / "agents.json", fake_upstream.url, models=models, context=context)


def _model_reads(
    proxy: ProxyServer, fake: FakeUpstream, sid: str, messages: list[Any], handle: str
) -> str:
    """What ``read_tool_output({"id": handle})`` answers the model on the next request."""
    fake.script(reply(None, tool_calls=[read_call(id=handle, limit=500)]), reply("done"))
    chat(proxy, sid, [*messages, {"role": "assistant", "content": "ok"}, USER])
    answered = fake.bodies()[-1]["messages"][-1]
    assert answered["role"] == "tool" and answered["tool_call_id"] == "int_1", answered
    return str(answered["content"])


def _branch(proxy: ProxyServer, sid: str) -> str:
    with api(proxy) as http:
        r = http.post(f"/v1/sessions/{sid}/branch", json={"id": f"{sid}-branch"})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (blob(9000, "old"), blob(9000, "new")),
        (blob(9000, "old"), "turn two's short output"),
        ("ü" * 12_000, blob(9000, "new")),  # 24,000 bytes: its spill is capped at RAW_CAP
    ],
    ids=["both-cut", "newer-kept-whole", "older-capped"],
)
def test_a_cut_results_marker_reads_that_result_once_its_id_comes_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream, first: str, second: str
) -> None:
    # Turn 1's call_0 is cut while it is the only call_0: its marker is frozen then. Turn 2
    # reuses call_0. The marker in turn 1's result must still lead to turn 1's bytes.
    messages = history("call_0", first, tag="a")
    chat(proxy, "cut", messages)
    messages += [{"role": "assistant", "content": "ok"}, *history("call_0", second, tag="b")]
    chat(proxy, "cut", messages)
    sent = fake_upstream.bodies()[-1]["messages"][2]["content"]
    args = marker_args(sent)
    assert args is not None, sent
    handle = args["id"]

    kept = first.encode()[:RAW_CAP].decode("utf-8", "ignore")
    page = _model_reads(proxy, fake_upstream, "cut", messages, handle)
    a, b, total, text = page_slice(page)
    assert (a, total) == (0, len(kept)) and text == kept[a:b], page[:200]
    with api(proxy) as http:
        assert read_all(http, "cut", handle) == kept
        meta = http.get(f"/v1/sessions/cut/tool-outputs/{handle}").json()
        assert (meta["capped"], meta["original_bytes"]) == (kept != first, len(first.encode()))
        assert read_all(http, "cut", "call_0") == second  # the bare id: the newest result
    branched = _branch(proxy, "cut")
    with api(proxy) as http:
        assert read_all(http, branched, handle) == kept
        # a branch keeps when each row and spill was written, which tells the bare id's reads
        # whether its newest result is the spill or the row
        assert read_all(http, branched, "call_0") == second


class Agent:
    """A client that numbers its one call ``call_0`` every step: each result is new text."""

    def __init__(self, proxy: ProxyServer, fake: FakeUpstream, sid: str) -> None:
        self.proxy, self.fake, self.sid = proxy, fake, sid
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Find out why the build is red."},
        ]

    def step(self) -> list[dict[str, Any]]:
        n = sum(m["role"] == "tool" for m in self.messages)
        self.fake.script(reply(None, tool_calls=[tool_call("read_file", {"n": n}, id="call_0")]))
        out = chat(self.proxy, self.sid, self.messages)
        prompt: list[dict[str, Any]] = self.fake.bodies()[-1]["messages"]
        self.messages.append(out.choices[0].message.model_dump(exclude_none=True))
        self.messages.append(
            {"role": "tool", "tool_call_id": "call_0", "content": blob(MAX_CHARS, f"step-{n}")}
        )
        return prompt


def _evicted_events(listener: Listener, results: int) -> list[dict[str, Any]]:
    """The ``context.evicted`` events the listener got, once they name ``results`` results
    (a transient event is NOTIFYed: it reaches the stream just after the reply)."""
    deadline = time.monotonic() + 10
    while True:
        events = listener.named("context.evicted")
        if sum(e["count"] for e in events) >= results or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


def test_an_evicted_results_placeholder_reads_that_result_once_its_id_comes_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    agent = Agent(proxy, fake_upstream, "evict")
    agent.step()  # the session exists: its event stream can be watched
    with Listener(proxy.origin, "evict") as listener:
        for _ in range(30):
            prompt = agent.step()
            cleared = [i for i, m in enumerate(prompt) if str(m["content"]).startswith(PLACEHOLDER)]
            if len(cleared) >= 2:
                break
        else:
            pytest.fail("no eviction pass cleared two results")
        evicted = _evicted_events(listener, len(cleared))
    handles = []
    for i in cleared:
        args = marker_args(prompt[i]["content"])
        assert args is not None, prompt[i]
        handles.append((args["id"], agent.messages[i]["content"]))  # the prompt keeps positions
    # The context.evicted events name each cleared result apart, as its placeholder does,
    # though every result came under call_0.
    assert [c for e in evicted for c in e["tool_call_ids"]] == ["call_0"] * len(cleared)
    assert [h for e in evicted for h in e["handles"]] == [h for h, _ in handles]

    oldest, want = handles[0]
    page = _model_reads(proxy, fake_upstream, "evict", agent.messages, oldest)
    a, b, total, text = page_slice(page)
    assert (a, total) == (0, len(want)) and text == want[a:b], page[:200]
    with api(proxy) as http:
        for handle, original in handles:
            assert read_all(http, "evict", handle) == original, handle
        assert read_all(http, "evict", "call_0") == agent.messages[-1]["content"]
    branched = _branch(proxy, "evict")
    with api(proxy) as http:
        for handle, original in handles:
            assert read_all(http, branched, handle) == original, handle


def test_a_pinned_read_of_a_redacted_result_finds_nothing_as_the_bare_read_does(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # Turn 1's call_0 held a secret (never stored, no handle); turn 2's call_0 is cut and
    # spilled. Turn 1's position must not read turn 2's spill, nor the redacted text.
    secret = "sk-" + "Z9" * 20
    messages = history("call_0", f"token {secret} then more", tag="a")
    chat(proxy, "redacted", messages)
    second = blob(9000, "new")
    messages += [{"role": "assistant", "content": "ok"}, *history("call_0", second, tag="b")]
    chat(proxy, "redacted", messages)
    with api(proxy) as http:
        gone = http.get("/v1/sessions/redacted/tool-outputs/call_0@2")
        assert gone.status_code == 404, gone.text
        assert (
            read_all(http, "redacted", "call_0@6") == second == read_all(http, "redacted", "call_0")
        )


@pytest.mark.parametrize("position", [2**31, 9_999_999_999])
def test_a_handle_past_any_position_is_not_found_as_an_unknown_one_is(
    proxy: ProxyServer, fake_upstream: FakeUpstream, position: int
) -> None:
    # A handle's position past a database integer (``pins.unpin`` reads up to ten digits)
    # names no result: it answers as an unknown handle does, not with the driver's error.
    messages = history("call_0", blob(9000, "cut"), tag="a")  # cut: read_tool_output is offered
    chat(proxy, "huge", messages)
    handle = f"call_0@{position}"
    page = _model_reads(proxy, fake_upstream, "huge", messages, handle)
    assert page == f"read_tool_output: no stored output with id {handle!r} in this session"
    with api(proxy) as http:
        unknown = http.get("/v1/sessions/huge/tool-outputs/call_9")
        for name in (handle, "call_0@2147483647"):
            r = http.get(f"/v1/sessions/huge/tool-outputs/{name}")
            assert r.status_code == unknown.status_code == 404, (name, r.text)
            assert r.text == unknown.text.replace("call_9", name), name
