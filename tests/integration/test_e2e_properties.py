"""Real agent transcripts replayed through the real proxy (HTTP, PostgreSQL, the fake upstream)
with every stage on at small windows, checking at every step what the provider received.

Each step sends the transcript's messages up to its next assistant turn, as the agent did; the
fake answers with the recorded turn and, every few steps, first calls ``read_tool_output`` on a
handle of its prompt (the proxy answers it and asks again). On every prompt the provider got
(e2e_checks.py): it fits the window (the step's prompt with the reserved output left over, an
internal round's the window), its tool calls are paired, every handle and lossless pointer it
names reads back exactly, the model's reads are answered with the right slice, a
``<related_context>`` hit quotes the message it names, and within a turn each prompt extends
the last; the client gets the recorded answer alone. At the end: the stored history is what
the client sent, and the session's event stream holds a ``context.*`` event for each action
the prompts show. The second pass (``extras``) turns on recitation, retrieval and memory
(one global fact, in every prompt) and streams every answer.

The suite runs a slice of each transcript (``STEPS``); ``scripts/e2e_props.sh`` replays them
whole (``CASCADE_TEST_E2E_STEPS=0``; ``CASCADE_TEST_E2E_LIMITS`` picks the windows).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from bench.trajectories import load
from proxy.cascade.eviction import PLACEHOLDER_PREFIX
from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.e2e_checks import (
    Handles,
    Listener,
    check_fits,
    check_history,
    check_paired,
    check_prefix,
    check_read_answer,
    check_related,
    check_suffix,
    names_own,
    summary_of,
)
from tests.integration.e2e_model import (
    FAST,
    MAIN,
    READ_PREFIX,
    ReplayModel,
    context_config,
    handles_in,
    text_of,
)
from tests.integration.transcripts import TRAJECTORIES, api, sdk

STEPS = int(os.environ.get("CASCADE_TEST_E2E_STEPS", "45"))
LIMITS = [int(n) for n in os.environ.get("CASCADE_TEST_E2E_LIMITS", "16000,32000").split(",")]
RESERVED = 1000
REUSE_IDS = os.environ.get("CASCADE_TEST_E2E_REUSE_IDS") == "1"
"""Replay each transcript with its call ids renumbered per step (``renumbered``)."""
RESTART = int(os.environ.get("CASCADE_TEST_E2E_RESTART", "0"))
"""The step after which the proxy is replaced by another on the same database (0: never)."""
READ_EVERY = 5
TRANSCRIPTS = {
    "mini-swe": "SWE-agent__mini-swe-agent__django__django-11910.traj.json",
    "spotter": "marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    "tau": "sierra-research__tau-bench__gpt-4o-airline.json",
}
FACT = "The replayed project keeps its tests under tests/."

Messages = list[dict[str, Any]]


def transcript(name: str) -> Messages:
    path = TRAJECTORIES / TRANSCRIPTS[name]
    if not path.is_file():
        pytest.skip(f"real agent transcript not found at {path}")
    messages = [dict(m) for m in load(path)[0].messages]
    return renumbered(messages) if REUSE_IDS else messages


def renumbered(messages: Messages) -> Messages:
    """The transcript as a client that numbers its calls ``call_0``, ``call_1`` … afresh in
    every assistant message sends it: ids come back, and each names several results."""
    out: Messages = []
    ids: dict[str, str] = {}
    for m in messages:
        calls = m.get("tool_calls") or []
        if calls:
            ids = {c["id"]: f"call_{k}" for k, c in enumerate(calls)}
            m = {**m, "tool_calls": [{**c, "id": ids[c["id"]]} for c in calls]}
        elif m.get("role") == "tool":
            m = {**m, "tool_call_id": ids.get(m["tool_call_id"], m["tool_call_id"])}
        out.append(m)
    return out


def tools_of(messages: Messages) -> list[dict[str, Any]]:
    names = sorted(
        {c["function"]["name"] for m in messages for c in m.get("tool_calls") or []}
    ) or ["noop"]
    schema = {"type": "object", "properties": {}}
    return [{"type": "function", "function": {"name": n, "parameters": schema}} for n in names]


class Replay:
    """One transcript through one proxy: drives the steps and checks each prompt."""

    def __init__(
        self, proxy: ProxyServer, fake: FakeUpstream, sid: str, limit: int, *, extras: bool
    ) -> None:
        self.proxy, self.fake, self.sid, self.limit = proxy, fake, sid, limit
        self.extras = self.stream = extras  # the second pass also streams every answer
        self.unique_ids = True
        self.model = ReplayModel(READ_EVERY)
        fake.default = self.model
        self.http = api(proxy)
        self.handles = Handles(self.http, sid)
        self.prompts: list[Messages] = []
        self.turns = 0
        self.last: Messages | None = None
        self.stable = 0
        self.shrunk = 0
        self.hits = 0
        self.carried: list[dict[str, Any]] = []  # transient events a restart's listener missed
        self.restarts = 0
        self.listener: Listener | None = None

    def run(
        self,
        messages: Messages,
        steps: int,
        restart: Callable[[], ProxyServer] | None = None,
        restart_at: int = 0,
    ) -> Messages:
        """Replay ``steps`` steps (0: all); with ``restart``, the proxy is stopped after
        step ``restart_at`` and another started on the same database takes over."""
        ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        self.unique_ids = len(ids) == len(set(ids))
        try:
            sent = self.steps(messages, steps, restart, restart_at)
            assert self.listener is not None
            self.check_events(self.listener)  # waits for the last step's reply to be stored
            check_history(self.http, self.sid, sent)
        finally:  # an open event stream would hold the proxy's stop
            if self.listener is not None:
                self.listener.__exit__()
            self.http.close()
        return sent

    def steps(
        self,
        messages: Messages,
        steps: int,
        restart: Callable[[], ProxyServer] | None,
        restart_at: int,
    ) -> Messages:
        client = sdk(self.proxy, self.sid)
        tools = tools_of(messages)
        history: Messages = []
        sent: Messages = []
        for msg in messages:
            if msg["role"] != "assistant" or not history or history[-1]["role"] == "assistant":
                history.append(msg)
                continue
            if steps and self.model.step >= steps:
                break
            self.model.answer = msg
            new_turn = history[-1]["role"] == "user"
            self.turns += new_turn
            seen = len(self.fake.requests)
            got = self.ask(client, history, tools)
            self.check_step(history, seen, msg, got, new_turn)
            history.append(got)
            sent = list(history)
            self.model.step += 1
            if restart is not None and self.model.step == restart_at and self.listener:
                self.settle(self.listener)  # the step's events are out before the proxy goes
                self.carried += self.listener.named("context.evicted")  # not stored, not replayed
                self.listener.__exit__()
                self.listener = None
                self.http.close()
                self.proxy = restart()
                self.restarts += 1
                client = sdk(self.proxy, self.sid)
                self.http = self.handles.http = api(self.proxy)
            if self.listener is None:
                self.listener = Listener(self.proxy.origin, self.sid).__enter__()
        return sent

    def ask(self, client: openai.OpenAI, history: Messages, tools: Messages) -> dict[str, Any]:
        """One step through the SDK: the assistant message the client gets, streamed or not."""
        if not self.stream:
            out = client.chat.completions.create(model=MAIN, messages=history, tools=tools)
            return out.choices[0].message.model_dump(exclude_none=True)
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        chunks = client.chat.completions.create(
            model=MAIN, messages=history, tools=tools, stream=True
        )
        for chunk in chunks:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content.append(delta.content or "")
            for tc in delta.tool_calls or []:
                empty = {"name": "", "arguments": ""}
                call = calls.setdefault(tc.index, {"id": "", "type": "function", "function": empty})
                call["id"] += tc.id or ""
                if tc.function is not None:
                    call["function"]["name"] += tc.function.name or ""
                    call["function"]["arguments"] += tc.function.arguments or ""
        got: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
        if calls:
            got["tool_calls"] = [calls[k] for k in sorted(calls)]
        return got

    def check_step(
        self, history: Messages, seen: int, recorded: dict[str, Any], got: Any, new_turn: bool
    ) -> None:
        step = self.model.step
        bodies = [
            r.json
            for r in self.fake.requests[seen:]
            if r.path.endswith("/chat/completions") and r.json.get("model") != FAST
        ]
        reads = [r for r in self.model.reads if r["step"] == step]
        assert len(bodies) == 1 + len(reads), f"step {step}: {len(bodies)} provider calls"
        if self.last is not None and not new_turn:
            prompt = bodies[0]["messages"]
            if check_prefix(f"step {step}", self.last, prompt):
                self.stable += 1
            elif len(prompt) < len(self.last) and summary_of(prompt) == summary_of(self.last):
                self.shrunk += 1
        self.last = bodies[0]["messages"]
        for k, body in enumerate(bodies):
            where = f"step {step} call {k}"
            prompt = body["messages"]
            self.prompts.append(prompt)
            check_fits(where, prompt, self.limit - RESERVED)  # internal rounds too
            check_paired(where, prompt)
            self.handles.check(where, prompt, history)
            if k == 0:  # a later call adds the model's read and its page
                live = check_suffix(where, prompt, history)
            shown = prompt[: len(bodies[0]["messages"])]
            self.hits += check_related(where, shown, history, live)
            if k:
                read = reads[k - 1]
                want = self.handles.expected(read["args"]["id"], history)
                check_read_answer(where, prompt, read, want)
        calls = got.get("tool_calls") or []
        assert not [c for c in calls if c["id"].startswith(READ_PREFIX)], step
        assert text_of(got.get("content")) == text_of(recorded.get("content")), step
        made = [(c["id"], c["function"]) for c in recorded.get("tool_calls") or []]
        assert [(c["id"], c["function"]) for c in calls] == made, step

    def settle(self, listener: Listener) -> None:
        """Wait (5 s at most) for every step's ``context.usage``, the last event of a step."""
        deadline = time.monotonic() + 5
        while len(listener.named("context.usage")) < self.model.step:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def check_events(self, listener: Listener) -> None:
        """A ``context.*`` event for each action the prompts show."""
        cut, cleared, summaries = set(), set(), set()
        for prompt in self.prompts:
            for m in prompt:
                text, own = text_of(m.get("content")), m.get("tool_call_id")
                if text.startswith(PLACEHOLDER_PREFIX):
                    cleared.add(own)
                elif own and any(names_own(h["id"], m) for h in handles_in(text)):
                    cut.add(own)
                if text.startswith("<conversation_summary>"):
                    summaries.add(text[: text.find("</conversation_summary>")])
        if dump := os.environ.get("CASCADE_TEST_E2E_DUMP"):  # the prompts, to look at
            Path(f"{dump}{self.sid}-{self.limit}.json").write_text(json.dumps(self.prompts))
        self.settle(listener)
        usage = listener.named("context.usage")
        assert len(usage) == self.model.step, f"{len(usage)} context.usage for {self.model.step}"
        truncated = [e["tool_call_id"] for e in listener.named("context.truncated")]
        evictions = [*self.carried, *listener.named("context.evicted")]
        evicted = [c for e in evictions for c in e["tool_call_ids"]]
        if self.unique_ids:  # else one id names several results
            assert len(truncated) == len(set(truncated)), "a result was reported cut twice"
            assert len(evicted) == len(set(evicted)), "a result was reported cleared twice"
        trimmed = listener.named("context.trimmed")
        assert len(trimmed) >= self.shrunk, f"{self.shrunk} prompts shrank, {len(trimmed)} trims"
        assert cut <= set(truncated), f"cut without context.truncated: {cut - set(truncated)}"
        assert cleared <= set(evicted), f"cleared without context.evicted: {cleared - set(evicted)}"
        done = listener.named("context.compaction.completed")
        assert len(done) >= len(summaries), (len(done), len(summaries))
        assert not listener.named("context.compaction.failed")
        started = listener.named("context.compaction.started")
        assert len(started) - len(done) in (0, 1), (len(started), len(done))
        if self.extras:
            assert len(listener.named("context.retrieval")) == self.turns, self.turns
        print(  # the replay's tally, shown with -s (scripts/e2e_props.sh)
            f"{self.sid} limit {self.limit}: {self.model.step} steps ({self.restarts} restarts),"
            f" {len(self.prompts)}"
            f" prompts ({self.stable} extend the last), {self.handles.count} handles read back,"
            f" {self.handles.pointers} pointers, {len(self.handles.ambiguous)} bare ids reused,"
            f" {len(self.model.reads)} reads,"
            f" {len(cut)} cut, {len(cleared)} cleared, {len(summaries)} summaries,"
            f" {len(trimmed)} trims ({self.shrunk} seen),"
            f" {len(listener.named('context.retrieval'))} retrievals ({self.hits} hits shown)"
        )


def _settings(
    tmp_path: Path, db_dsn: str, fake: FakeUpstream, limit: int, extras: bool
) -> Settings:
    models = {
        "default": {"contextLimit": limit, "reservedOutput": RESERVED},
        FAST: {"contextLimit": 128000},
    }
    extra: dict[str, Any] = {}
    if extras:
        extra["embedding"] = {"provider": "openai", "model": "text-embedding-fake"}
    path = write_config(
        tmp_path / "agents.json",
        fake.url,
        models=models,
        context=context_config(limit, extras=extras),
        **extra,
    )
    return Settings(
        database_url=db_dsn, config=path, keepalive_seconds=0.3, embedding_poll_seconds=0.1
    )


class Proxies:
    """The test's proxies, one at a time, on one database; each stopped once replaced and
    the last after the test."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.current: ProxyServer | None = None

    def start(self) -> ProxyServer:
        self.stop()
        self.current = ProxyServer(self.settings).start()
        return self.current

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None


@pytest.fixture
def started(tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream) -> Iterator[Any]:
    made: list[Proxies] = []

    def start(limit: int, extras: bool) -> Proxies:
        made.append(Proxies(_settings(tmp_path, db_dsn, fake_upstream, limit, extras)))
        return made[-1]

    yield start
    for proxies in made:
        proxies.stop()


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
@pytest.mark.parametrize("extras", [False, True], ids=["core", "extras"])
def test_transcript_replay_keeps_every_property(
    name: str, limit: int, extras: bool, started: Any, fake_upstream: FakeUpstream
) -> None:
    messages = transcript(name)
    proxies = started(limit, extras)
    proxy = proxies.start()
    if extras:
        with api(proxy) as http:
            r = http.post("/v1/memory", json={"scope": "global", "text": FACT})
            assert r.status_code == 201, r.text
    replay = Replay(proxy, fake_upstream, f"e2e-{name}", limit, extras=extras)
    replay.run(messages, STEPS, proxies.start if RESTART else None, RESTART)
    assert replay.prompts
    if extras:
        assert all(FACT in text_of(p[0].get("content")) for p in replay.prompts)
