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
``CASCADE_TEST_E2E_REPLICAS=2`` runs two replicas on the database and sends consecutive steps
to each in turn (``CASCADE_TEST_E2E_PICK=random:<seed>``: to one drawn with that seed), as a
load balancer without session affinity does (e2e_proxies.py); ``CASCADE_TEST_POOLER=
transaction`` puts every replica behind PgBouncer in transaction mode, ``DATABASE_LISTEN_URL``
direct (tests/integration/pooler). ``CASCADE_TEST_E2E_DERIVED=1`` sends no session id: every
step must land in the session the proxy derives (and names in ``X-Session-Id``) at the first,
whichever replica serves it. The suite runs a slice across two replicas (the last test
here), and the same behind PgBouncer (tests/integration/pooler/test_pooled_e2e.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from bench.trajectories import load
from proxy.cascade.eviction import PLACEHOLDER_PREFIX
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
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
    handles_in,
    renumbered,
    text_of,
    tools_of,
)
from tests.integration.e2e_proxies import (
    PICK,
    REPLICAS,
    RESERVED,
    Proxies,
    check_same_events,
    replay_settings,
)
from tests.integration.transcripts import TRAJECTORIES, api, sdk

STEPS = int(os.environ.get("CASCADE_TEST_E2E_STEPS", "45"))
LIMITS = [int(n) for n in os.environ.get("CASCADE_TEST_E2E_LIMITS", "16000,32000").split(",")]
REUSE_IDS = os.environ.get("CASCADE_TEST_E2E_REUSE_IDS") == "1"
"""Replay each transcript with its call ids renumbered per step (``renumbered``)."""
DERIVED = os.environ.get("CASCADE_TEST_E2E_DERIVED") == "1"
"""Send no session id: each step lands in the session the proxy derives from the opening."""
RESTART = int(os.environ.get("CASCADE_TEST_E2E_RESTART", "0"))
"""The step after which the replica that served it is replaced by another process on the
same database (0: never)."""
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


class Replay:
    """One transcript through the test's proxies: drives the steps, each through the replica
    :meth:`Proxies.pick` names, and checks each prompt. The handles a step's prompts name
    are read back through another replica than the one that made them, and the events are
    checked on the first replica's stream, which with several must match the last one's
    (``check_same_events``): each crosses from one replica to the other."""

    def __init__(
        self, proxies: Proxies, fake: FakeUpstream, sid: str, limit: int, *, extras: bool
    ) -> None:
        self.proxies, self.fake, self.sid, self.limit = proxies, fake, sid, limit
        self.extras = self.stream = extras  # the second pass also streams every answer
        self.unique_ids = True
        self.model = ReplayModel(READ_EVERY)
        fake.default = self.model
        self.clients: dict[str, tuple[openai.OpenAI, httpx.Client]] = {}
        self.handles = Handles(self.client(proxies.servers[0])[1], sid)
        self.prompts: list[Messages] = []
        self.turns = 0
        self.last: Messages | None = None
        self.stable = 0
        self.shrunk = 0
        self.hits = 0
        self.carried: list[dict[str, Any]] = []  # transient events a restart's listener missed
        self.restarts = 0
        self.served = [0] * len(proxies.servers)  # steps each replica served
        self.listener: Listener | None = None
        self.echo: Listener | None = None  # the last replica's stream, with several
        self.echoes = len(proxies.servers) > 1  # until a restart ends one of the two streams

    def client(self, proxy: ProxyServer) -> tuple[openai.OpenAI, httpx.Client]:
        """The SDK and the API client on ``proxy``, made once per process."""
        if proxy.origin not in self.clients:
            plain = openai.OpenAI(base_url=proxy.url, api_key="sk-test-client", max_retries=0)
            self.clients[proxy.origin] = (plain if DERIVED else sdk(proxy, self.sid), api(proxy))
        return self.clients[proxy.origin]

    def run(self, messages: Messages, steps: int, restart_at: int = 0) -> Messages:
        """Replay ``steps`` steps (0: all); with ``restart_at``, the replica that served that
        step is stopped after it and another started on the same database takes its place."""
        ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        self.unique_ids = len(ids) == len(set(ids))
        try:
            sent = self.steps(messages, steps, restart_at)
            assert self.listener is not None
            self.check_events(self.listener)  # waits for the last step's reply to be stored
            if self.echo is not None and self.echoes:
                check_same_events(self.listener, self.echo)
            for proxy in self.proxies.servers:  # each replica reads the same history
                check_history(self.client(proxy)[1], self.sid, sent)
        finally:  # an open event stream would hold the proxy's stop
            for listener in (self.listener, self.echo):
                if listener is not None:
                    listener.__exit__()
            for _, http in self.clients.values():
                http.close()
        return sent

    def restart(self, k: int) -> None:
        """Replace replica ``k``; the event stream, when it was open there, is reopened."""
        self.echoes = self.echoes and k not in (0, len(self.proxies.servers) - 1)
        if k == 0 and self.listener is not None:
            self.settle(self.listener)  # the step's events are out before the proxy goes
            self.carried += self.listener.named("context.evicted")  # not stored, not replayed
            self.listener.__exit__()
            self.listener = None
        old = self.proxies.servers[k].origin
        self.proxies.restart(k)
        self.clients.pop(old)[1].close()
        self.restarts += 1

    def steps(self, messages: Messages, steps: int, restart_at: int) -> Messages:
        tools = tools_of(messages)
        servers = self.proxies.servers
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
            k = self.proxies.pick()
            self.served[k] += 1
            # a step's handles read back through the next replica, not the one that made them
            self.handles.http = self.client(servers[(k + 1) % len(servers)])[1]
            got = self.ask(self.client(servers[k])[0], history, tools)
            self.check_step(history, seen, msg, got, new_turn)
            history.append(got)
            sent = list(history)
            self.model.step += 1
            if self.model.step == restart_at and self.listener:
                self.restart(k)
            if self.listener is None:
                self.listener = Listener(servers[0].origin, self.sid).__enter__()
            if self.echo is None and self.echoes:
                self.echo = Listener(servers[-1].origin, self.sid).__enter__()
        return sent

    def ask(self, client: openai.OpenAI, history: Messages, tools: Messages) -> dict[str, Any]:
        """One step through the SDK: the assistant message the client gets, streamed or not."""
        raw = client.chat.completions.with_raw_response.create(
            model=MAIN, messages=history, tools=tools, stream=self.stream
        )
        self.served_as(raw.headers.get("x-session-id"))
        if not self.stream:
            return raw.parse().choices[0].message.model_dump(exclude_none=True)
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        for chunk in raw.parse():
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

    def served_as(self, named: str | None) -> None:
        """Every step lands in one session: the replay's, or with ``DERIVED`` the one the
        first step's response named (``auto-…``), which no replica leaves for a lane."""
        if DERIVED and self.model.step == 0 and named is not None:
            self.sid = self.handles.sid = named
        assert named == self.sid, f"step {self.model.step}: session {named}, not {self.sid}"

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
            f"{self.sid} limit {self.limit}: {self.model.step} steps ({self.restarts} restarts,"
            f" replicas served {self.served}, pooler {self.proxies.settings_used().db_pooler}),"
            f" {len(self.prompts)}"
            f" prompts ({self.stable} extend the last), {self.handles.count} handles read back,"
            f" {self.handles.pointers} pointers, {len(self.handles.ambiguous)} bare ids reused,"
            f" {len(self.model.reads)} reads,"
            f" {len(cut)} cut, {len(cleared)} cleared, {len(summaries)} summaries,"
            f" {len(trimmed)} trims ({self.shrunk} seen),"
            f" {len(listener.named('context.retrieval'))} retrievals ({self.hits} hits shown)"
        )


@pytest.fixture
def started(tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream) -> Iterator[Any]:
    made: list[Proxies] = []

    def start(limit: int, extras: bool, replicas: int = REPLICAS, pick: str = PICK) -> Proxies:
        settings = replay_settings(tmp_path, db_dsn, fake_upstream, limit, extras)
        made.append(Proxies(settings, replicas, pick))
        return made[-1]

    yield start
    for proxies in made:
        proxies.stop()


def replayed(name: str, limit: int, extras: bool, proxies: Proxies, fake: FakeUpstream) -> Replay:
    """Replay transcript ``name`` (``STEPS`` steps) through ``proxies``, checking each prompt."""
    messages = transcript(name)
    proxy = proxies.start()
    if extras:
        with api(proxy) as http:
            r = http.post("/v1/memory", json={"scope": "global", "text": FACT})
            assert r.status_code == 201, r.text
    replay = Replay(proxies, fake, f"e2e-{name}", limit, extras=extras)
    replay.run(messages, STEPS, RESTART)
    assert replay.prompts
    if extras:
        assert all(FACT in text_of(p[0].get("content")) for p in replay.prompts)
    return replay


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
@pytest.mark.parametrize("extras", [False, True], ids=["core", "extras"])
def test_transcript_replay_keeps_every_property(
    name: str, limit: int, extras: bool, started: Any, fake_upstream: FakeUpstream
) -> None:
    replayed(name, limit, extras, started(limit, extras), fake_upstream)


def test_a_replay_across_two_replicas_keeps_every_property(
    started: Any, fake_upstream: FakeUpstream
) -> None:
    """A slice of one transcript, each step sent to one of two replicas on one database
    drawn with a fixed seed, as a load balancer without session affinity does: each replica
    meets a history its caches last saw steps ago, the handles read back through the other
    one and the events are watched across them. ``scripts/e2e_props.sh`` replays every
    transcript whole this way with ``CASCADE_TEST_E2E_REPLICAS=2`` (the suite's slice is
    short: a whole replay takes longer than the suite allows one test)."""
    proxies = started(LIMITS[0], True, replicas=2, pick="random:3")
    replay = replayed("spotter", LIMITS[0], True, proxies, fake_upstream)
    assert min(replay.served) > 1, replay.served  # each replica took steps after the other's
