"""A ``POST /compact`` that waits for the compaction in flight when a reload revokes its
proxy key compacts nothing (README, "Proxy keys"): run after it, the fast model is called,
billed, for a key the operator took back."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Agent,
    Model,
    Stack,
    wait_until,
    words,
)

OTHER_KEY = "cascade-key-other-5d1e"
SID = "revoked"


def _post_compact(origin: str, key: str, out: list[httpx.Response]) -> threading.Thread:
    def run() -> None:
        with httpx.Client(base_url=origin, headers={"authorization": f"Bearer {key}"}) as c:
            out.append(c.post(f"/v1/sessions/{SID}/compact", timeout=20))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_compact_waiting_for_another_when_its_key_is_removed_compacts_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASCADE_TEST_KEY_CLIENT", CLIENT_KEY)
    monkeypatch.setenv("CASCADE_TEST_KEY_OTHER", OTHER_KEY)
    held = Pacer(first=True)  # the first compaction's briefing, until the test lets it come
    model = Model(fast_pacer=held)
    fake_upstream.default = model
    s = Stack(tmp_path, db_dsn, fake_upstream, summarize={"keepRecent": 2})
    path = tmp_path / "agents.json"
    keys = [
        {"keyEnv": "CASCADE_TEST_KEY_CLIENT", "tenant": "team"},
        {"keyEnv": "CASCADE_TEST_KEY_OTHER", "tenant": "team"},
    ]
    cfg = json.loads(path.read_text())
    with s:
        path.write_text(json.dumps({**cfg, "auth": {"keys": keys}}))
        s.proxy.state("config").reload()
        agent = Agent(s.client(SID))
        for i in range(3):
            agent.say(words(200, f"t{i}"))
        s.replied(SID)
        first: list[httpx.Response] = []
        running = _post_compact(s.proxy.origin, OTHER_KEY, first)
        wait_until(lambda: len(model.fast_times) == 1, 10, "the first compaction's call")
        agent.say("meanwhile")  # more to fold once the first compaction is done
        s.replied(SID)
        second: list[httpx.Response] = []
        waiting = _post_compact(s.proxy.origin, CLIENT_KEY, second)
        time.sleep(0.3)  # it waits for the first's claim
        path.write_text(json.dumps({**cfg, "auth": {"keys": keys[1:]}}))
        s.proxy.state("config").reload()
        held.allow(20)
        running.join(15)
        waiting.join(15)
        assert first and first[0].status_code == 200, first[0].text if first else "no answer"
        assert second and second[0].status_code == 401, second[0].text if second else "none"
        assert len(model.fast_times) == 1, "the compaction ran for a revoked key"
        assert [r["version"] for r in s.summaries(SID)] == [1]


def test_a_compact_waiting_for_another_when_its_key_is_narrowed_compacts_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key a reload limits to other agents than the session's while the compact waits is
    held to them once the wait ends: the 403 ``agent_not_allowed``, nothing compacted."""
    monkeypatch.setenv("CASCADE_TEST_KEY_CLIENT", CLIENT_KEY)
    monkeypatch.setenv("CASCADE_TEST_KEY_OTHER", OTHER_KEY)
    held = Pacer(first=True)
    model = Model(fast_pacer=held)
    fake_upstream.default = model
    s = Stack(tmp_path, db_dsn, fake_upstream, summarize={"keepRecent": 2})
    path = tmp_path / "agents.json"
    keys = [
        {"keyEnv": "CASCADE_TEST_KEY_CLIENT", "tenant": "team"},
        {"keyEnv": "CASCADE_TEST_KEY_OTHER", "tenant": "team"},
    ]
    cfg = json.loads(path.read_text())
    with s:
        path.write_text(json.dumps({**cfg, "auth": {"keys": keys}}))
        s.proxy.state("config").reload()
        agent = Agent(s.client(SID))
        for i in range(3):
            agent.say(words(200, f"t{i}"))
        s.replied(SID)
        first: list[httpx.Response] = []
        running = _post_compact(s.proxy.origin, OTHER_KEY, first)
        wait_until(lambda: len(model.fast_times) == 1, 10, "the first compaction's call")
        agent.say("meanwhile")
        s.replied(SID)
        second: list[httpx.Response] = []
        waiting = _post_compact(s.proxy.origin, CLIENT_KEY, second)
        time.sleep(0.3)  # it waits for the first's claim
        agents = {**cfg["agents"], "other": {}}
        limited = [{**keys[0], "agents": ["other"]}, keys[1]]
        path.write_text(json.dumps({**cfg, "agents": agents, "auth": {"keys": limited}}))
        s.proxy.state("config").reload()
        held.allow(20)
        running.join(15)
        waiting.join(15)
        assert first and first[0].status_code == 200, first[0].text if first else "no answer"
        assert second and second[0].status_code == 403, second[0].text if second else "none"
        assert second[0].json()["error"]["code"] == "agent_not_allowed"
        time.sleep(0.6)  # a poll of the claim lands at most 0.5 s after it is freed
        assert len(model.fast_times) == 1, "the compaction ran for an agent the key lost"
        assert [r["version"] for r in s.summaries(SID)] == [1]
