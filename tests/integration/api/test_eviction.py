"""Issue #3, lossless eviction end to end: an agent loop through the openai SDK fills a small
context window; the fake upstream records every prompt the provider would have seen.

Window: 8000 tokens, eviction at 50%, the last 2 rounds protected, passes of >= 300 tokens,
results of >= 100 tokens eligible, ``keep_me`` excluded. Every result is 2000 chars (~500
tokens), so a pass fires about every fifth step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.rendering import count_prompt_tokens
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS
from tests.integration.api.sessions_helpers import messages_of
from tests.integration.transcripts import api, blob, marker_args, read_all, sdk, wait_event

LIMIT = 8000
AT_FRACTION = 0.5
KEEP_ROUNDS = 2
RESULT_CHARS = 2000
PLACEHOLDER = "[context-cleared]"


def context(*, enabled: bool = True) -> dict[str, Any]:
    return {
        "eviction": {
            "enabled": enabled,
            "atFraction": AT_FRACTION,
            "keepRecentRounds": KEEP_ROUNDS,
            "clearAtLeast": 300,
            "minResultTokens": 100,
            "excludeTools": ["keep_me"],
        },
        "summarize": {"enabled": False},
    }


def write(path: Path, upstream: str, *, enabled: bool = True) -> Path:
    models = {"default": {"contextLimit": LIMIT, "reservedOutput": 500}}
    return write_config(path, upstream, models=models, context=context(enabled=enabled))


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    """This module's config, under the name the shared ``settings``/``proxy`` fixtures read."""
    return write(tmp_path / "agents.json", fake_upstream.url)


class Agent:
    """A client-side agent loop: each step the model calls one tool and gets its result."""

    def __init__(self, proxy: ProxyServer, fake: FakeUpstream, sid: str = "agent") -> None:
        self.client = sdk(proxy, sid)
        self.fake = fake
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Find out why the build is red."},
        ]
        self.outputs: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.prompts: list[list[dict[str, Any]]] = []
        self.image: dict[str, Any] | None = None  # sent beside each result's text, if any

    def step(self, tool: str = "read_file") -> list[dict[str, Any]]:
        n = len(self.outputs)
        cid = f"call_{n:02d}"
        self.fake.script(reply(None, tool_calls=[tool_call(tool, {"n": n}, id=cid)]))
        out = self.client.chat.completions.create(
            model="gpt-4o", messages=self.messages, tools=CLIENT_TOOLS
        )
        self.prompts.append(self.fake.bodies()[-1]["messages"])
        self.messages.append(out.choices[0].message.model_dump(exclude_none=True))
        self.outputs[cid] = blob(RESULT_CHARS, f"{tool}-{n}")
        self.names[cid] = tool
        content: Any = self.outputs[cid]
        if self.image is not None:
            content = [{"type": "text", "text": content}, self.image]
        self.messages.append({"role": "tool", "tool_call_id": cid, "content": content})
        return self.prompts[-1]

    def run_until_evicted(self, passes: int = 1, max_steps: int = 30) -> None:
        for _ in range(max_steps):
            self.step("keep_me" if not self.outputs else "read_file")
            if len(eviction_steps(self.prompts)) >= passes:
                return
        pytest.fail(f"fewer than {passes} eviction passes in {max_steps} steps")


def cleared(prompt: list[dict[str, Any]]) -> set[str]:
    return {
        m["tool_call_id"]
        for m in prompt
        if m["role"] == "tool" and str(m["content"]).startswith(PLACEHOLDER)
    }


def eviction_steps(prompts: list[list[dict[str, Any]]]) -> list[int]:
    """Indexes of the prompts in which new placeholders appeared."""
    return [i for i in range(1, len(prompts)) if cleared(prompts[i]) - cleared(prompts[i - 1])]


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["role"], m.get("tool_call_id") or m.get("tool_calls")) for m in messages]


def test_old_results_become_placeholders_once_over_at_fraction(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    agent = Agent(proxy, fake_upstream)
    agent.run_until_evicted()
    first = eviction_steps(agent.prompts)[0]
    prompt, before = agent.prompts[first], agent.prompts[first - 1]
    client_view = agent.messages[: len(prompt)]

    assert not any(cleared(p) for p in agent.prompts[:first])
    # Soft trigger on the provider's count of the previous prompt plus this step's growth:
    # not before the window reaches 50%, and at most one step after.
    threshold = AT_FRACTION * LIMIT
    assert count_prompt_tokens(agent.prompts[first - 2]) < threshold
    assert count_prompt_tokens(before) + RESULT_CHARS // 4 >= threshold
    # Pairing and order are untouched: same roles, same ids, same calls, same length.
    assert shape(prompt) == shape(client_view)

    results = [m for m in prompt if m["role"] == "tool"]
    protected = {m["tool_call_id"] for m in results[-KEEP_ROUNDS:]}
    for m in results:
        cid, original = m["tool_call_id"], agent.outputs[m["tool_call_id"]]
        if cid in protected or agent.names[cid] == "keep_me":
            assert m["content"] == original, cid
        else:
            assert m["content"].startswith(PLACEHOLDER), cid
            assert marker_args(m["content"]) == {"id": f"{cid}@{prompt.index(m)}"}
    assert len(cleared(prompt)) == len(results) - KEEP_ROUNDS - 1  # everything eligible, at once
    assert "read_tool_output" in [
        t["function"]["name"] for t in fake_upstream.bodies()[-1].get("tools", [])
    ]
    assert count_prompt_tokens(prompt) < count_prompt_tokens(before)

    with api(proxy) as http:
        rows = http.get("/v1/sessions/agent/messages").json()["data"]
        evicted = {r["message"].get("tool_call_id") for r in rows if r["evicted"]}
        assert evicted == cleared(prompt)
        for cid in cleared(prompt):  # spilled at eviction: every byte comes back
            assert read_all(http, "agent", cid, limit=900) == agent.outputs[cid]


IMAGE = {  # low detail: 85 tokens, which this module's fake provider (chars / 4) never counts
    "type": "image_url",
    "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
}


def test_an_evicted_result_of_text_and_image_parts_is_stored_with_its_parts(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    # A browser tool's page text and screenshot: the placeholder frees the window of both,
    # says the image is not read back, and the stored row keeps every part the client sent.
    agent = Agent(proxy, fake_upstream, sid="shots")
    agent.image = IMAGE
    agent.run_until_evicted()
    prompt = agent.prompts[-1]
    ids = cleared(prompt)
    assert ids
    for m in prompt:
        if m["role"] == "tool" and m["tool_call_id"] in ids:
            assert isinstance(m["content"], str), m
            assert "and 1 image_url part that only re-running the tool brings back" in m["content"]
            assert marker_args(m["content"]) == {"id": f"{m['tool_call_id']}@{prompt.index(m)}"}
    with api(proxy) as http:
        rows = messages_of(http, "shots", form="sent")
        sent = {r["message"].get("tool_call_id"): r for r in rows}
        for cid in ids:
            assert sent[cid]["evicted"]
            assert sent[cid]["message"]["content"] == [
                {"type": "text", "text": agent.outputs[cid]},
                IMAGE,
            ]
            assert read_all(http, "shots", cid, limit=900) == agent.outputs[cid]


def test_eviction_persists_and_consecutive_prompts_share_their_prefix(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    agent = Agent(proxy, fake_upstream)
    agent.run_until_evicted(passes=2)
    agent.step()
    passes = eviction_steps(agent.prompts)
    assert len(passes) == 2
    placeholders: dict[str, str] = {}
    for i in range(1, len(agent.prompts)):
        prev, cur = agent.prompts[i - 1], agent.prompts[i]
        assert len(cur) == len(prev) + 2
        changed = [j for j, (a, b) in enumerate(zip(prev, cur, strict=False)) if a != b]
        if i not in passes:
            assert changed == [], f"step {i} rewrote {changed} outside an eviction pass"
            continue
        for j in changed:  # a pass only swaps results for placeholders, in place
            assert prev[j]["role"] == cur[j]["role"] == "tool"
            assert prev[j]["tool_call_id"] == cur[j]["tool_call_id"]
            assert not prev[j]["content"].startswith(PLACEHOLDER)
            assert cur[j]["content"].startswith(PLACEHOLDER)
        for m in cur:  # never re-evicted: a placeholder, once sent, stays byte-identical
            if m["role"] == "tool" and m["content"].startswith(PLACEHOLDER):
                assert placeholders.setdefault(m["tool_call_id"], m["content"]) == m["content"]
    keep = [m for m in agent.prompts[-1] if m.get("tool_call_id") == "call_00"]
    assert keep[0]["content"] == agent.outputs["call_00"]


def test_reclaimed_tokens_show_in_usage_events_and_the_session(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    agent = Agent(proxy, fake_upstream)
    agent.run_until_evicted()
    with api(proxy) as http:
        usage = wait_event(http, "agent", "context.usage", lambda d: d["reclaimed_tokens"] > 0)
        session = http.get("/v1/sessions/agent").json()
    assert session["reclaimed_tokens"] == usage["reclaimed_tokens"] >= 300
    per_result = RESULT_CHARS // 4 - 100  # a placeholder costs well under 100 tokens
    assert usage["reclaimed_tokens"] >= per_result * len(cleared(agent.prompts[-1]))


def test_eviction_toggle_takes_effect_without_restart(
    proxy: ProxyServer, fake_upstream: FakeUpstream, config_path: Path
) -> None:
    agent = Agent(proxy, fake_upstream)
    agent.step("keep_me")

    def reload(enabled: bool) -> None:
        headers = {"Last-Event-ID": "0"}
        with (
            api(proxy) as http,
            http.stream("GET", "/v1/sessions/agent/events", headers=headers) as r,
        ):
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("event:"))  # subscribed
            write(config_path, fake_upstream.url, enabled=enabled)
            assert next(line for line in lines if "config." in line) == "event: config.reloaded"

    reload(False)
    for _ in range(12):  # far past 50%: ~6000 of 8000 tokens
        agent.step()
    assert count_prompt_tokens(agent.prompts[-1]) > 0.7 * LIMIT
    assert not any(cleared(p) for p in agent.prompts)

    reload(True)
    prompt = agent.step()
    assert len(cleared(prompt)) == len(agent.outputs) - 1 - KEEP_ROUNDS - 1
