"""One proxy (or several replicas) wired to the fake upstream, and the agent that drives it.

The compaction tests, and the tests of what is built on compaction (replicas, the overflow
guard, the ledger, tracing …), share these helpers. The fake upstream answers both the agent's
model and the fast model the summariser calls (told apart by ``model``). :class:`Stack` writes
its own config with a small ``contextLimit``, so thresholds are crossed in a few requests, and
reads the proxy's durable effects (``summaries`` rows, ``events`` rows) straight from the test
database.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai

from proxy.settings import Settings
from tests.fakes.replies import Pacer, RecordedRequest, Reply, error, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, replied, stop_all, write_config
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
    "compaction_events",
    "stack",
    "wait_until",
    "words",
]

CLIENT_KEY = "sk-test-client"
FAST = "fast-model"
MAIN = "gpt-fake"
SECTIONS = ("## Objective", "## Decisions & Facts", "## Files & State", "## Open Tasks",
            "## Next Step")  # fmt: skip


def briefing(files: str = "(none)", *, objective: str = "Fix the parser") -> str:
    """A well-formed five-section answer from the fast model."""
    return (
        f"## Objective\n{objective}\n\n## Decisions & Facts\n- keep the public API\n\n"
        f"## Files & State\n{files}\n\n## Open Tasks\n- finish the fix\n\n"
        "## Next Step\nrun the tests"
    )


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
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

    ``fast_delay`` delays the briefing's first byte; ``fast_pacer`` holds it as the test
    allows (:class:`~tests.fakes.replies.Pacer`); ``fast_failures`` answers the next N
    fast-model calls with a 500; ``brief(request)`` builds the briefing text; ``fast`` names
    the fast models (agents with fast models of their own). Every fast call
    is timestamped on arrival (the fake calls the responder when the request comes in).
    """

    def __init__(
        self,
        *,
        brief: Callable[[RecordedRequest], str] | None = None,
        fast_delay: float = 0.0,
        fast_failures: int = 0,
        fast_pacer: Pacer | None = None,
        main: Callable[[RecordedRequest], Reply] | None = None,
        fast: tuple[str, ...] = (FAST,),
    ) -> None:
        self.fast = fast
        self.brief = brief or (lambda req: briefing())
        self.fast_delay = fast_delay
        self.fast_pacer = fast_pacer
        self.fast_failures = fast_failures
        self.main = main or (lambda req: reply("ok"))
        self.fast_times: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, req: RecordedRequest) -> Any:
        if req.json.get("model") not in self.fast:
            return self.main(req)
        with self._lock:
            self.fast_times.append(time.monotonic())
            fail = self.fast_failures > 0
            self.fast_failures -= 1 if fail else 0
        if fail:
            return error(500)
        return reply(self.brief(req), first_byte_delay=self.fast_delay, pacer=self.fast_pacer)


class Stack:
    """One proxy (or several replicas) on one test database, wired to one fake upstream.

    The agent's models get ``limit``/``reserved``; the fast model its own, larger window so
    the summariser sees whole spans. Eviction is off: only summarisation relieves pressure.
    ``context``: further top-level ``context`` blocks (e.g. ``memoryPromotion``).
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
        context: Mapping[str, Any] | None = None,
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
            **(context or {}),
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
            stop_all(started)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        stop_all(self.servers)

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

    def replied(self, session: str) -> None:
        """Return once ``session``'s last reply is stored (conftest's ``replied``)."""
        with httpx.Client(
            base_url=self.proxy.origin,
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=10,
        ) as http:
            replied(http, session)

    def delete(self, session: str) -> None:
        """``DELETE /v1/sessions/{session}`` as the client's tenant; it must answer 200."""
        resp = httpx.delete(
            f"{self.proxy.origin}/v1/sessions/{session}",
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text

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

    def settle(self, session: str, requests: int, timeout: float = 20.0) -> None:
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


def compact_now_called(s: Stack, replica: int = 0) -> threading.Event:
    """An event set once the replica's summarizer is next asked to compact now (``/compact``,
    or a request over the hard threshold once it measured): from then on that caller has
    its session and waits for the compaction in flight, what a test orders its next step by."""
    summarizer = s.servers[replica].state("summarizer")
    compact_now = summarizer.compact_now
    asked = threading.Event()

    async def noted(job: Any, *args: Any) -> Any:
        asked.set()
        return await compact_now(job, *args)

    summarizer.compact_now = noted
    return asked
