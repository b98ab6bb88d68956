"""A proxy with two keys of one tenant, one limited to the ``reviewer`` agent and one not,
and three agents on the fake provider: the set-up of the tests of what a limited key
reaches (sessions, memory suggestions)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, words
from tests.integration.api.conftest import ProxyServer, StartProxy, write_config

__all__ = [
    "LIMITED",
    "FULL",
    "TENANT",
    "AGENTS",
    "start_with_limited_key",
    "client",
    "compact_in_thread",
    "noting_arrival",
    "reviewers_session",
]

LIMITED = "cascade-key-reviewer-0c51d2"
FULL = "cascade-key-full-e84b17"
TENANT = "team"
AGENTS = {
    "default": {"provider": "openai"},
    "coder": {"provider": "openai"},
    "reviewer": {"provider": "openai"},
}


def start_with_limited_key(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limited_to: Sequence[str] = ("reviewer",),
    **config: Any,
) -> ProxyServer:
    """The proxy, its config given ``config`` besides the keys (``agents`` replaces the
    three agents); the limited key may use the agents ``limited_to``."""
    monkeypatch.setenv("CASCADE_TEST_KEY_LIMITED", LIMITED)
    monkeypatch.setenv("CASCADE_TEST_KEY_FULL", FULL)
    auth = {
        "keys": [
            {"keyEnv": "CASCADE_TEST_KEY_LIMITED", "tenant": TENANT, "agents": [*limited_to]},
            {"keyEnv": "CASCADE_TEST_KEY_FULL", "tenant": TENANT},
        ]
    }
    config.setdefault("agents", AGENTS)
    path = write_config(tmp_path / "agents.json", fake_upstream.url, auth=auth, **config)
    return start_proxy(path)


def client(origin: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=origin, timeout=10, headers={"authorization": f"Bearer {key}"})


def reviewers_session(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    sid: str,
    agents: dict[str, Any],
    model: Model,
) -> tuple[ProxyServer, Agent]:
    """The proxy (``start_with_limited_key``, ``agents``, summaries keeping 2 messages),
    ``model`` its upstream, and session ``sid`` of the reviewer agent, three turns long
    (something to fold), sent with the full key."""
    fake_upstream.default = model
    proxy = start_with_limited_key(
        start_proxy,
        fake_upstream,
        tmp_path,
        monkeypatch,
        agents=agents,
        context={"summarize": {"keepRecent": 2}},
    )
    full = openai.OpenAI(
        base_url=proxy.url,
        api_key=FULL,
        max_retries=0,
        default_headers={"X-Session-Id": sid},
        timeout=20,
    )
    agent = Agent(full, model="reviewer")
    for i in range(3):
        agent.say(words(200, f"t{i}"))
    return proxy, agent


def compact_in_thread(
    origin: str, key: str, sid: str, out: dict[str, httpx.Response], name: str = ""
) -> threading.Thread:
    """``POST /v1/sessions/{sid}/compact`` with ``key``, on a thread of its own (started):
    its answer goes to ``out[name]`` (``out[key]`` without one)."""

    def run() -> None:
        with client(origin, key) as http:
            out[name or key] = http.post(f"/v1/sessions/{sid}/compact", timeout=30)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def noting_arrival(proxy: ProxyServer, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once a compaction reaches ``proxy``'s summarizer (``compact_now``), past the
    checks made as its request arrived."""
    summarizer = proxy.state("summarizer")
    arrived = threading.Event()
    compact_now = summarizer.compact_now

    async def noted(job: Any, pause: Any = None) -> Any:
        arrived.set()
        return await compact_now(job, pause)

    monkeypatch.setattr(summarizer, "compact_now", noted)
    return arrived
