"""A ``POST /compact`` that waits for the compaction in flight when a reload revokes its
proxy key compacts nothing (README, "Proxy keys"): run after it, the fast model is called,
billed, for a key the operator took back."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Agent,
    Model,
    Stack,
    compact_now_called,
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


@dataclass
class _Race:
    """Two compacts of session ``SID``: the other key's running, its fast call held by
    ``held``; the client key's waiting for its claim. The answers go to ``first`` and
    ``second``; ``cfg`` and ``keys`` are the file's, both keys in force."""

    s: Stack
    model: Model
    held: Pacer
    path: Path
    cfg: dict[str, Any]
    keys: list[dict[str, Any]]
    first: list[httpx.Response] = field(default_factory=list)
    second: list[httpx.Response] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def reload(self, cfg: dict[str, Any]) -> None:
        self.path.write_text(json.dumps(cfg))
        self.s.proxy.state("config").reload()

    def finish(self) -> None:
        """Lets the first compaction's call come, and waits for both answers."""
        self.held.allow(20)
        for thread in self.threads:
            thread.join(15)


@contextlib.contextmanager
def _racing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> Iterator[_Race]:
    """The stack (open while the block runs) with both keys in force, ``SID`` with
    something to fold, and the two compacts of ``_Race`` under way."""
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
    race = _Race(s, model, held, path, json.loads(path.read_text()), keys)
    with s:
        race.reload({**race.cfg, "auth": {"keys": keys}})
        agent = Agent(s.client(SID))
        for i in range(3):
            agent.say(words(200, f"t{i}"))
        s.replied(SID)
        race.threads.append(_post_compact(s.proxy.origin, OTHER_KEY, race.first))
        wait_until(lambda: len(model.fast_times) == 1, what="the first compaction's call")
        agent.say("meanwhile")  # more to fold once the first compaction is done
        s.replied(SID)
        asked = compact_now_called(s)
        race.threads.append(_post_compact(s.proxy.origin, CLIENT_KEY, race.second))
        assert asked.wait(20), "the second /compact did not wait"  # for the first's claim
        yield race


def test_a_compact_waiting_for_another_when_its_key_is_removed_compacts_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _racing(tmp_path, db_dsn, fake_upstream, monkeypatch) as race:
        race.reload({**race.cfg, "auth": {"keys": race.keys[1:]}})
        race.finish()
        first, second = race.first, race.second
        assert first and first[0].status_code == 200, first[0].text if first else "no answer"
        assert second and second[0].status_code == 401, second[0].text if second else "none"
        assert len(race.model.fast_times) == 1, "the compaction ran for a revoked key"
        assert [r["version"] for r in race.s.summaries(SID)] == [1]


def test_a_compact_waiting_for_another_when_its_key_is_narrowed_compacts_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key a reload limits to other agents than the session's while the compact waits is
    held to them once the wait ends: the 403 ``agent_not_allowed``, nothing compacted."""
    with _racing(tmp_path, db_dsn, fake_upstream, monkeypatch) as race:
        agents = {**race.cfg["agents"], "other": {}}
        limited = [{**race.keys[0], "agents": ["other"]}, race.keys[1]]
        race.reload({**race.cfg, "agents": agents, "auth": {"keys": limited}})
        race.finish()
        first, second = race.first, race.second
        assert first and first[0].status_code == 200, first[0].text if first else "no answer"
        assert second and second[0].status_code == 403, second[0].text if second else "none"
        assert second[0].json()["error"]["code"] == "agent_not_allowed"
        time.sleep(0.6)  # a poll of the claim lands at most 0.5 s after it is freed
        assert len(race.model.fast_times) == 1, "the compaction ran for an agent the key lost"
        assert [r["version"] for r in race.s.summaries(SID)] == [1]
