"""Durable summarisation through the real proxy (issue #4 items 1–4 and 7).

The official SDK talks to a real proxy; the fake upstream answers both the agent's model and
the fast model the summariser calls (told apart by ``model``). Each test writes its own config
with a small ``contextLimit`` so thresholds are crossed in a few requests, and reads the
proxy's durable effects (``summaries`` rows, ``events`` rows) straight from the test database.

The helpers at the top are shared by the other compaction test files (they import them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import openai
import pytest

from proxy.history import canonical_message
from proxy.services.compaction import DurableSummarizer
from proxy.services.compaction_job import CompactionJob
from proxy.settings import Settings
from tests.fakes.upstream import (
    FakeUpstream,
    RecordedRequest,
    Reply,
    error,
    reply,
)
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.conftest import run_sync

__all__ = [
    "CLIENT_KEY",
    "FAST",
    "MAIN",
    "SECTIONS",
    "Agent",
    "Model",
    "Stack",
    "briefing",
    "canon",
    "summary_of",
    "first_user_text",
    "has_summary",
    "live_part",
    "prompt_messages",
    "stack",
    "wait_until",
    "tool_round",
    "words",
]

CLIENT_KEY = "sk-test-client"
FAST = "fast-model"
MAIN = "gpt-fake"
SECTIONS = ("## Objective", "## Decisions & Facts", "## Files & State", "## Open Tasks",
            "## Next Step")  # fmt: skip
SUMMARY_OPEN = "<conversation_summary>"
SUMMARY_CLOSE = "</conversation_summary>"


# ----------------------------------------------------------------------------- helpers


def briefing(files: str = "(none)", *, objective: str = "Fix the parser") -> str:
    """A well-formed five-section answer from the fast model."""
    return (
        f"## Objective\n{objective}\n\n## Decisions & Facts\n- keep the public API\n\n"
        f"## Files & State\n{files}\n\n## Open Tasks\n- finish the fix\n\n"
        "## Next Step\nrun the tests"
    )


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy (work the proxy does off-path)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.02)


class Model:
    """A callable responder for the fake: the fast model gets briefings, the agent's model
    gets ``main(request)`` (default ``"ok"``).

    ``fast_delay`` delays the briefing's first byte; ``fast_failures`` answers the next N
    fast-model calls with a 500; ``brief(request)`` builds the briefing text. Every fast call
    is timestamped on arrival (the fake calls the responder when the request comes in).
    """

    def __init__(
        self,
        *,
        brief: Callable[[RecordedRequest], str] | None = None,
        fast_delay: float = 0.0,
        fast_failures: int = 0,
        main: Callable[[RecordedRequest], Reply] | None = None,
    ) -> None:
        self.brief = brief or (lambda req: briefing())
        self.fast_delay = fast_delay
        self.fast_failures = fast_failures
        self.main = main or (lambda req: reply("ok"))
        self.fast_times: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, req: RecordedRequest) -> Any:
        if req.json.get("model") != FAST:
            return self.main(req)
        with self._lock:
            self.fast_times.append(time.monotonic())
            fail = self.fast_failures > 0
            self.fast_failures -= 1 if fail else 0
        if fail:
            return error(500)
        return reply(self.brief(req), first_byte_delay=self.fast_delay)


def prompt_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(body.get("messages") or [])


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


def first_user_text(body: Mapping[str, Any]) -> str:
    for m in prompt_messages(body):
        if m.get("role") == "user":
            return _text(m.get("content"))
    return ""


def has_summary(body: Mapping[str, Any]) -> bool:
    return any(SUMMARY_OPEN in _text(m.get("content")) for m in prompt_messages(body))


def summary_of(body: Mapping[str, Any]) -> str | None:
    """The briefing folded into the prompt, or None."""
    for m in prompt_messages(body):
        text = _text(m.get("content"))
        if text.startswith(SUMMARY_OPEN):
            return text[len(SUMMARY_OPEN) : text.index(SUMMARY_CLOSE)].strip()
    return None


def live_part(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The prompt without the folded summary, canonicalised for comparison with a history."""
    out = []
    for m in prompt_messages(body):
        text = m.get("content")
        if isinstance(text, str) and text.startswith(SUMMARY_OPEN):
            rest = text.split(SUMMARY_CLOSE, 1)[1].lstrip("\n")
            if not rest:
                continue  # a user message inserted only to carry the summary
            m = {**m, "content": rest}
        out.append(canonical_message(m))
    return out


def canon(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [canonical_message(m) for m in messages]


class Stack:
    """One proxy (or several replicas) on one test database, wired to one fake upstream.

    The agent's models get ``limit``/``reserved``; the fast model its own, larger window so
    the summariser sees whole spans. Eviction is off: only summarisation relieves pressure.
    """

    def __init__(
        self,
        tmp_path: Path,
        db_dsn: str,
        fake: FakeUpstream,
        *,
        limit: int = 4000,
        reserved: int = 500,
        summarize: Mapping[str, Any] | None = None,
        replicas: int = 1,
        fast_limit: int = 32000,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.fake = fake
        self.db_dsn = db_dsn
        ctx: dict[str, Any] = {
            "summarize": {
                "softFraction": 0.5,
                "hardFraction": 0.9,
                "keepRecent": 4,
                **(summarize or {}),
            },
            "eviction": {"enabled": False},
        }
        path = write_config(
            tmp_path / "agents.json",
            fake.url,
            models={
                "default": {"contextLimit": limit, "reservedOutput": reserved},
                FAST: {"contextLimit": fast_limit},
            },
            context=ctx,
        )
        proc = Settings(
            database_url=db_dsn,
            config=path,
            keepalive_seconds=0.3,
            watch_config=False,
            **(settings or {}),
        )
        self.servers = [ProxyServer(proc) for _ in range(replicas)]

    def __enter__(self) -> Stack:
        started: list[ProxyServer] = []
        try:
            for server in self.servers:
                started.append(server.start())
        except BaseException:
            for server in started:
                server.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.stop()

    @property
    def proxy(self) -> ProxyServer:
        return self.servers[0]

    def client(self, session: str, replica: int = 0) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.servers[replica].url,
            api_key=CLIENT_KEY,
            max_retries=0,
            default_headers={"X-Session-Id": session},
            timeout=20,
        )

    # -- what the upstream saw

    def main_bodies(self) -> list[dict[str, Any]]:
        return [b for b in self.fake.bodies() if b.get("model") != FAST]

    def fast_bodies(self) -> list[dict[str, Any]]:
        return [b for b in self.fake.bodies() if b.get("model") == FAST]

    # -- what the proxy stored

    def query(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        async def run() -> list[dict[str, Any]]:
            conn = await asyncpg.connect(self.db_dsn)
            try:
                await conn.set_type_codec(
                    "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
                )
                return [dict(r) for r in await conn.fetch(sql, *args)]
            finally:
                await conn.close()

        return run_sync(run())

    def events(self, session: str, *names: str) -> list[dict[str, Any]]:
        """Persisted events of ``session`` in order, as ``{"name", **data}``."""
        rows = self.query(
            "SELECT name, data FROM events WHERE session_id = $1 ORDER BY id", session
        )
        return [{"name": r["name"], **r["data"]} for r in rows if not names or r["name"] in names]

    def summaries(self, session: str) -> list[dict[str, Any]]:
        return self.query(
            "SELECT version, boundary, boundary_hash, content, tokens, model, invalidated_at"
            " FROM summaries WHERE session_id = $1 ORDER BY version",
            session,
        )

    def settle(self, session: str, requests: int, timeout: float = 5.0) -> None:
        """Wait until ``requests`` steps have finished (each publishes one context.usage)."""
        wait_until(
            lambda: len(self.events(session, "context.usage")) >= requests,
            timeout,
            f"{requests} context.usage events",
        )


@contextlib.contextmanager
def stack(
    tmp_path: Path, db_dsn: str, fake: FakeUpstream, model: Model | None = None, **kwargs: Any
) -> Iterator[Stack]:
    """A started :class:`Stack` whose fake answers through ``model``."""
    fake.default = model or Model()
    with Stack(tmp_path, db_dsn, fake, **kwargs) as s:
        yield s


class Agent:
    """A client that resends its whole history, as agents do."""

    def __init__(
        self,
        client: openai.OpenAI,
        *,
        system: str | None = "You are a coding agent.",
        model: str = MAIN,
    ) -> None:
        self.client = client
        self.model = model
        self.messages: list[dict[str, Any]] = (
            [{"role": "system", "content": system}] if system else []
        )
        self.latencies: list[float] = []

    def fill(self, turns: int = 5) -> None:
        """``turns`` user turns of 450 words: on the 4000-token window most tests here use,
        the fifth crosses ``softFraction`` (0.5 by default) and a compaction starts."""
        for i in range(turns):
            self.say(words(450, f"t{i}"))

    def say(self, text: str, **kwargs: Any) -> str:
        """Send a user turn; append and return the assistant's text."""
        self.messages.append({"role": "user", "content": text})
        return self.step(**kwargs)

    def step(self, **kwargs: Any) -> str:
        t0 = time.monotonic()
        resp = self.client.chat.completions.create(
            model=self.model, messages=self.messages, **kwargs
        )
        self.latencies.append(time.monotonic() - t0)
        msg = resp.choices[0].message.model_dump(exclude_none=True)
        self.messages.append(msg)
        return str(msg.get("content") or "")

    def say_stream(self, text: str) -> str:
        self.messages.append({"role": "user", "content": text})
        t0 = time.monotonic()
        parts = [
            chunk.choices[0].delta.content or ""
            for chunk in self.client.chat.completions.create(
                model=self.model, messages=self.messages, stream=True
            )
            if chunk.choices
        ]
        self.latencies.append(time.monotonic() - t0)
        content = "".join(parts)
        self.messages.append({"role": "assistant", "content": content})
        return content


def words(n_tokens: int, tag: str = "w") -> str:
    """About ``n_tokens`` tokens (chars/4) of filler, unique per ``tag``."""
    unit = f"{tag} lorem "
    return (unit * (n_tokens * 4 // len(unit) + 1))[: n_tokens * 4]


def compaction_events(s: Stack, session: str) -> list[dict[str, Any]]:
    return s.events(
        session,
        "context.compaction.started",
        "context.compaction.completed",
        "context.compaction.failed",
    )


# ----------------------------------------------------------------------------- 1. O(window)


def test_after_a_compaction_the_prompt_is_summary_plus_messages_since_the_boundary(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model()) as s:
        agent = Agent(s.client("win"))
        agent.fill()
        (row,) = wait_until(lambda: s.summaries("win"), what="a summary")
        agent.say("and now?")
        last = s.main_bodies()[-1]
        boundary = row["boundary"]
        assert boundary > 1
        # the system message, then only what came after the boundary — nothing older is sent
        assert live_part(last) == canon(agent.messages[:1] + agent.messages[boundary:-1])
        assert summary_of(last) == row["content"]
        assert first_user_text(last).startswith(SUMMARY_OPEN)
        assert all(words(450, f"t{i}")[:40] not in str(last) for i in range(2))


# ----------------------------------------------------------------------------- 2. soft / hard


def test_soft_threshold_compacts_in_background_without_delaying_the_request(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=1.0)
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        agent = Agent(s.client("soft"))
        for i in range(4):
            agent.say(words(450, f"t{i}"))
        assert not model.fast_times, "below softFraction nothing is compacted"
        agent.say(words(450, "cross"))  # occupancy now over 0.5 of 4000
        assert agent.latencies[-1] < 0.5, "the crossing request waited for the summariser"
        wait_until(lambda: model.fast_times, what="the fast model to be called")
        assert s.summaries("soft") == [], "the briefing is still being written"
        (row,) = wait_until(lambda: s.summaries("soft"), 3.0, "the background summary")
        assert row["version"] == 1 and row["model"] == FAST
        started, completed = compaction_events(s, "soft")
        assert started["name"] == "context.compaction.started" and started["trigger"] == "soft"
        assert completed["name"] == "context.compaction.completed"
        assert completed["duration_ms"] >= 900


def test_a_new_sessions_first_request_over_the_soft_threshold_compacts_what_it_brought(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """A first request too long to be guessed new has its messages held back by its turn
    (services.history); the background compaction it starts reads the store, so the turn
    stores them before it starts, and the briefing folds them. The test holds back every
    INSERT into messages for a second, so a compaction started before they are stored
    would read an empty session (and fold nothing), whichever statement ran first."""
    locked, free = threading.Event(), threading.Event()

    async def hold_inserts() -> None:
        conn = await asyncpg.connect(db_dsn)
        try:
            async with conn.transaction():
                await conn.execute("LOCK TABLE messages IN SHARE MODE")  # reads go on
                locked.set()
                await asyncio.sleep(1.0)
        finally:
            await conn.close()
            free.set()

    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model) as s:
        agent = Agent(s.client("resumed-soft"))
        for i in range(5):  # 11 messages, over 0.5 of 4000 tokens: one request crosses
            agent.messages += [
                {"role": "user", "content": words(450, f"t{i}")},
                {"role": "assistant", "content": f"done {i}"},
            ]
        holder = threading.Thread(target=run_sync, args=(hold_inserts(),))
        holder.start()
        assert locked.wait(5.0)
        agent.say("go on")
        holder.join()
        assert free.is_set()
        (row,) = wait_until(lambda: s.summaries("resumed-soft"), 5.0, "the background summary")
        assert row["version"] == 1 and row["boundary"] > 1
        started, completed = compaction_events(s, "resumed-soft")
        assert started["trigger"] == "soft"
        assert completed["name"] == "context.compaction.completed"


def test_a_background_compaction_runs_while_the_crossing_answer_is_slow(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    # One connection, and the request that crossed the soft threshold waits 1.5 s for its
    # answer: it holds no connection meanwhile (issue 24), so its compaction runs at once.
    def main(req: RecordedRequest) -> Reply:
        slow = "cross" in _text(req.json["messages"][-1].get("content"))
        return reply("ok", first_byte_delay=1.5 if slow else 0.0)

    model = Model(main=main)
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        model,
        settings={"pool_max_size": 1, "pool_timeout_seconds": 0.3},
    ) as s:
        agent = Agent(s.client("starved"))
        for i in range(4):
            agent.say(words(450, f"t{i}"))
        started = time.monotonic()
        agent.say(words(450, "cross"))  # over softFraction; answered after 1.5 s
        assert model.fast_times and model.fast_times[0] - started < 1.0
        wait_until(lambda: s.summaries("starved"), 5.0, "the summary")


async def test_a_background_compaction_that_gets_no_connection_is_skipped_not_queued(
    db_dsn: str,
) -> None:
    """Every connection busy past the pool's wait: the compaction gives up (the next request
    over the soft threshold starts another) instead of queueing."""
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=1)
    summarizer = DurableSummarizer(
        pool=pool,
        upstream=None,  # type: ignore[arg-type]  # never reached
        bus=None,  # type: ignore[arg-type]
        count=len,  # type: ignore[arg-type]
        acquire_timeout=0.3,
    )
    job = CompactionJob(
        tenant="t", session_id="s", provider=None, fast_model="fast", fast_limits=None,
        cfg=None, headers={}, trigger="soft",
    )  # type: ignore[arg-type]  # fmt: skip
    try:
        async with pool.acquire():  # held elsewhere for longer than the wait
            started = time.monotonic()
            assert summarizer.start_background(job)
            assert await summarizer._tasks[("t", "s")] is None
            assert 0.25 <= time.monotonic() - started < 2
    finally:
        await pool.close()


def test_background_compaction_is_deduplicated_per_session(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=1.0)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"hardFraction": 0.95}) as s:
        agent = Agent(s.client("dedup"))
        agent.fill(7)  # the 5th crosses softFraction; 2 more while it is in flight
        assert max(agent.latencies) < 0.5
        wait_until(lambda: s.summaries("dedup"), 3.0, "the summary")
        s.settle("dedup", 7)
        assert len(model.fast_times) == 1
        assert [e["name"] for e in compaction_events(s, "dedup")] == [
            "context.compaction.started",
            "context.compaction.completed",
        ]


# Across replicas: tests/integration/api/test_replicas.py
# (test_a_compaction_runs_once_for_both_replicas_and_is_counted_once).


def test_hard_threshold_waits_for_the_compaction_in_flight(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=1.0)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"hardFraction": 0.8}) as s:
        agent = Agent(s.client("hard"))
        agent.fill()
        assert agent.latencies[-1] < 0.5
        agent.say(words(1000, "big"))  # over 0.8 of 4000 but under limit - reserved
        assert agent.latencies[-1] > 0.5, "the hard request did not wait for the summary"
        assert len(model.fast_times) == 1, "the in-flight compaction was enough"
        last = s.main_bodies()[-1]
        (row,) = s.summaries("hard")
        assert summary_of(last) == row["content"]
        assert live_part(last) == canon(agent.messages[:1] + agent.messages[row["boundary"] : -1])
        triggers = [e["trigger"] for e in compaction_events(s, "hard")]
        assert triggers == ["soft", "soft"]


# With one pooled connection, held by the request itself, a compaction that took a second
# one waited for ever (so would every request once all of them did): it runs on the
# request's own connection.
@pytest.mark.parametrize(
    "proc",
    [None, {"pool_max_size": 1, "pool_timeout_seconds": 2.0}],
    ids=["pool", "one-connection"],
)
def test_hard_threshold_compacts_synchronously_when_nothing_is_in_flight(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, proc: dict[str, Any] | None
) -> None:
    model = Model()
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        model,
        summarize={"softFraction": 0.8, "hardFraction": 0.8, "keepRecent": 2},
        settings=proc,
    ) as s:
        agent = Agent(s.client("hard-sync"))
        agent.say(words(1000, "a"))
        agent.say(words(1000, "b"))
        assert not model.fast_times
        agent.say(words(1250, "c"))  # ~3280 > 0.8 of 4000, under limit - reserved
        assert len(model.fast_times) == 1
        assert has_summary(s.main_bodies()[-1])
        assert [e["trigger"] for e in compaction_events(s, "hard-sync")] == ["hard", "hard"]


def test_background_false_compacts_synchronously(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=0.5)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("sync"))
        agent.fill()
        assert agent.latencies[-1] >= 0.5, "the crossing request did not wait"
        (row,) = s.summaries("sync")
        crossing = s.main_bodies()[-1]
        assert summary_of(crossing) == row["content"]
        assert live_part(crossing) == canon(
            agent.messages[:1] + agent.messages[row["boundary"] : -1]
        )
        names = [e["name"] for e in s.events("sync")]
        done = names.index("context.compaction.completed")
        assert names[done + 1 :].count("context.usage") == 1, "compacted before the step ended"


# ----------------------------------------------------------------------------- 3. the span


def tool_round(n: int, size: int = 350) -> list[dict[str, Any]]:
    """An assistant message with two tool calls and their two results."""
    calls = [
        {
            "id": f"call_{n}{k}",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "src/mod_{n}{k}.py"}}'},
        }
        for k in "ab"
    ]
    results = [
        {
            "role": "tool",
            "tool_call_id": f"call_{n}{k}",
            "content": f"contents of src/mod_{n}{k}.py: " + words(size, f"r{n}{k}"),
        }
        for k in "ab"
    ]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


def assert_paired(messages: Sequence[Mapping[str, Any]]) -> None:
    """Every tool result directly follows the assistant round that called it, and every call
    of a round is answered before anything else."""
    pending: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            assert m.get("tool_call_id") in pending, f"orphan tool result {m.get('tool_call_id')}"
            pending.discard(m["tool_call_id"])
            continue
        assert not pending, f"unanswered tool calls {pending}"
        pending = {c["id"] for c in m.get("tool_calls") or ()}
    assert not pending, f"unanswered tool calls {pending}"


def test_the_folded_span_never_splits_a_tool_round_and_goes_to_the_fast_model(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(
        tmp_path, db_dsn, fake_upstream, model, summarize={"background": False, "keepRecent": 2}
    ) as s:
        agent = Agent(s.client("rounds"))
        agent.messages += [
            {"role": "user", "content": "Why does the build fail?"},
            *tool_round(1),
            *tool_round(2),
            *tool_round(3),
        ]
        agent.step()  # one request, already over softFraction
        (row,) = s.summaries("rounds")
        # keepRecent=2 would cut between call_3a and call_3b: the cut moves before the round
        assert row["boundary"] == 8
        assert agent.messages[8]["tool_calls"][0]["id"] == "call_3a"
        (fast,) = s.fast_bodies()
        folded = fast["messages"][-1]["content"]
        assert "src/mod_1a.py" in folded and "call_2b" in folded
        assert "call_3a" not in folded, "the kept round was folded too"
        (main,) = s.main_bodies()
        assert main["model"] == MAIN
        assert live_part(main) == canon(agent.messages[:1] + agent.messages[8:-1])
        assert_paired(main["messages"])


def test_a_failing_fast_model_is_retried_then_reported_and_the_previous_summary_kept(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("fail"))
        agent.fill()
        (v1,) = s.summaries("fail")
        for i in range(2):
            agent.say(words(450, f"u{i}"))
        assert len(model.fast_times) == 1
        model.fast_failures = 3
        assert agent.say(words(450, "cross-again")) == "ok", "the request itself must succeed"
        assert len(model.fast_times) == 4, "one success, then exactly three attempts"
        assert s.summaries("fail") == [v1], "the previous state is intact"
        last = s.main_bodies()[-1]
        assert summary_of(last) == v1["content"]
        assert live_part(last) == canon(agent.messages[:1] + agent.messages[v1["boundary"] : -1])
        failed = compaction_events(s, "fail")[-1]
        assert failed["name"] == "context.compaction.failed"
        assert failed["attempts"] == 3 and "500" in failed["error"]
        agent.say("next")  # the fast model works again: the next step compacts
        assert [r["version"] for r in s.summaries("fail")] == [1, 2]


# ----------------------------------------------------------------------------- 4. the rows


def test_summaries_are_versioned_rows_and_each_merges_the_previous_one(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    def brief(req: RecordedRequest) -> str:
        return briefing(objective=f"objective v{len(model.fast_times)}")

    model = Model(brief=brief)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("versions"))
        for i in range(9):
            agent.say(words(450, f"t{i}"))
        v1, v2 = s.summaries("versions")
        assert (v1["version"], v2["version"]) == (1, 2)
        assert v1["boundary"] < v2["boundary"]
        assert "objective v1" in v1["content"] and "objective v2" in v2["content"]
        for row in (v1, v2):
            (stored,) = s.query(
                "SELECT hash FROM messages WHERE session_id = $1 AND pos = $2"
                " AND superseded_at IS NULL",
                "versions",
                row["boundary"] - 1,
            )
            assert row["boundary_hash"] == stored["hash"]
        second = s.fast_bodies()[1]["messages"][-1]["content"]
        assert f"<previous_summary>\n{v1['content']}\n</previous_summary>" in second
        # the second span starts where the first ended: nothing is folded twice
        assert words(450, "t0")[:40] not in second
        last = s.main_bodies()[-1]
        assert summary_of(last) == v2["content"]
        for row in s.summaries("versions"):
            assert [h for h in SECTIONS if h in row["content"]] == list(SECTIONS)


@pytest.mark.parametrize("system", ["You are a coding agent.", None])
def test_the_summary_is_folded_into_the_first_user_message_never_a_system_message(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, system: str | None
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize={"background": False}) as s:
        agent = Agent(s.client("fold"), system=system)
        for i in range(6):
            agent.say(words(450, f"t{i}"))
        last = s.main_bodies()[-1]
        roles = [m["role"] for m in last["messages"]]
        assert roles.count("system") == (1 if system else 0)
        if system:
            assert last["messages"][0] == {"role": "system", "content": system}
        first_user = roles.index("user")
        assert first_user == (1 if system else 0)
        assert first_user_text(last).startswith(SUMMARY_OPEN)
        assert sum(SUMMARY_OPEN in str(m.get("content")) for m in last["messages"]) == 1


def test_a_reflect_pass_condenses_a_summary_over_reflect_tokens(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    long_files = "\n".join(f"- `src/pkg/module_{i:03d}.py` is done" for i in range(120))
    short = briefing("- `src/pkg/module_119.py` is done", objective="condensed")

    def brief(req: RecordedRequest) -> str:
        system = req.json["messages"][0]["content"]
        return short if "grown too long" in system else briefing(long_files)

    model = Model(brief=brief)
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        model,
        summarize={"background": False, "reflectTokens": 300},
    ) as s:
        agent = Agent(s.client("reflect"))
        agent.fill()
        first, second = s.fast_bodies()
        assert "grown too long" not in first["messages"][0]["content"]
        assert "grown too long" in second["messages"][0]["content"]
        assert "src/pkg/module_000.py" in second["messages"][1]["content"]
        (row,) = s.summaries("reflect")
        assert row["content"] == short
        assert summary_of(s.main_bodies()[-1]) == short


def test_a_history_diverging_before_the_boundary_invalidates_the_summary(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=0.3)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"hardFraction": 0.95}) as s:
        agent = Agent(s.client("diverge"))
        agent.fill()
        (v1,) = wait_until(lambda: s.summaries("diverge"), 3.0, "the summary")
        agent.say("still fine")
        assert summary_of(s.main_bodies()[-1]) == v1["content"]
        agent.messages[1] = {"role": "user", "content": "edited task: " + words(440, "e")}
        agent.say("go on")
        last = s.main_bodies()[-1]
        assert summary_of(last) is None, "a stale summary reached the model"
        assert live_part(last) == canon(agent.messages[:-1])
        (row,) = s.summaries("diverge")[:1]
        assert row["invalidated_at"] is not None
        # the replacement is built from the edited history
        wait_until(lambda: len(s.summaries("diverge")) == 2, 3.0, "a fresh summary")
        assert "edited task" in s.fast_bodies()[-1]["messages"][-1]["content"]


def test_a_history_diverging_after_the_boundary_keeps_the_summary(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize={"background": False}) as s:
        agent = Agent(s.client("regen"))
        agent.fill()
        (v1,) = s.summaries("regen")
        agent.messages[-1] = {"role": "assistant", "content": "a regenerated answer"}
        agent.say("continue")
        last = s.main_bodies()[-1]
        assert summary_of(last) == v1["content"]
        assert live_part(last) == canon(agent.messages[:1] + agent.messages[v1["boundary"] : -1])
        assert s.summaries("regen")[0]["invalidated_at"] is None


def test_a_summary_is_discarded_when_the_history_changes_while_it_is_written(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=1.0)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"hardFraction": 0.95}) as s:
        agent = Agent(s.client("race"))
        agent.fill()
        wait_until(lambda: model.fast_times, what="the compaction to start")
        agent.messages[1] = {"role": "user", "content": "edited while summarising"}
        agent.say("go on")
        events = wait_until(
            lambda: [
                e for e in compaction_events(s, "race") if e["name"] != "context.compaction.started"
            ],
            3.0,
            "the outcome",
        )
        assert events[0]["name"] == "context.compaction.failed"
        assert "history changed" in events[0]["error"]
        assert s.summaries("race") == []
        agent.say("and?")
        assert summary_of(s.main_bodies()[-1]) is None


# ----------------------------------------------------------------------------- 7. events


def test_compaction_events_carry_tokens_duration_and_version(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=0.2)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("events"))
        for i in range(9):
            agent.say(words(450, f"t{i}"))
        model.fast_failures = 3
        for i in range(2):
            agent.say(words(450, f"f{i}"))
        s.settle("events", 11)
        events = s.events("events")
        comp = [e for e in events if e["name"].startswith("context.compaction.")]
        names = [e["name"].rsplit(".", 1)[1] for e in comp]
        assert names[:4] == ["started", "completed", "started", "completed"]
        assert "failed" in names[4:]
        s1, c1, s2, c2 = comp[:4]
        assert s1["summary_version"] is None and s2["summary_version"] == 1
        assert (c1["summary_version"], c2["summary_version"]) == (1, 2)
        for started, completed in ((s1, c1), (s2, c2)):
            assert started["tokens_before"] == completed["tokens_before"]
            assert completed["tokens_after"] < completed["tokens_before"]
            assert completed["duration_ms"] >= 200
            assert completed["folded_messages"] == completed["to_pos"] - completed["from_pos"]
        failed = comp[names.index("failed")]
        assert failed["summary_version"] == 2
        assert failed["tokens_after"] == failed["tokens_before"] > 0
        assert failed["duration_ms"] >= 0 and failed["attempts"] == 3
        # one context.usage per step, and after a compaction it shows the smaller prompt
        usage = [e for e in events if e["name"] == "context.usage"]
        assert len(usage) == 11
        for completed in (c1, c2):
            after = events[events.index(completed) + 1 :]
            following = next(e for e in after if e["name"] == "context.usage")
            assert following["prompt_tokens"] < completed["tokens_before"]


def test_the_thresholds_count_the_summary_in_the_occupancy(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    big = briefing("\n".join(f"- `src/pkg/module_{i:03d}.py` is done" for i in range(120)))
    model = Model(brief=lambda req: big)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("occ"))
        agent.fill()
        assert len(model.fast_times) == 1
        usage = s.events("occ", "context.usage")[-1]
        assert usage["prompt_tokens"] > 1000, "the summary is a large part of the prompt"
        while len(model.fast_times) < 2:
            assert len(agent.messages) < 40, "no second compaction"
            agent.say(words(200, f"n{len(agent.messages)}"))
        s.settle("occ", len(agent.latencies))
        events = s.events("occ")
        names = [e["name"] for e in events]
        first_done = names.index("context.compaction.completed")
        second = names.index("context.compaction.started", first_done)
        between = [e["fraction"] for e in events[first_done:second] if e["name"] == "context.usage"]
        # the second compaction starts on the step after the provider's count crosses 0.5,
        # not once the messages alone (without the summary) do
        assert between and max(between) < 0.5 + 0.08, between
