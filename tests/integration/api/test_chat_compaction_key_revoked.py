"""A chat that waits for the compaction of its session in flight, after it took the session
(a ``/compact`` command, or a turn over the hard threshold), when a reload revokes its
proxy key is refused once that wait ends (README, "Proxy keys"), as ``POST /compact`` is
(test_compact_key_revoked.py): run after it, the fast model is called, billed, and the
provider too, for a key the operator took back."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    MAIN,
    Agent,
    Model,
    Stack,
    wait_until,
    words,
)

OTHER_KEY = "cascade-key-other-7a2c"
SID = "revoked-chat"
KEYS = [
    {"keyEnv": "CASCADE_TEST_KEY_CLIENT", "tenant": "team"},
    {"keyEnv": "CASCADE_TEST_KEY_OTHER", "tenant": "team"},
]


def _post(
    origin: str, key: str, path: str, body: Any, out: list[httpx.Response]
) -> threading.Thread:
    def run() -> None:
        headers = {"authorization": f"Bearer {key}", "x-session-id": SID}
        with httpx.Client(base_url=origin, headers=headers) as c:
            out.append(c.post(path, json=body, timeout=20))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _revoked_while_waiting(
    tmp_path: Path,
    db_dsn: str,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    last: dict[str, Any],
    *,
    stream: bool,
    summarize: dict[str, Any],
    sizes: tuple[int, ...] = (200, 200, 200),
    meanwhile: str = "meanwhile",
    narrow: bool = False,
    fixed: list[int] | None = None,
) -> tuple[Stack, Model, list[httpx.Response], int]:
    monkeypatch.setenv("CASCADE_TEST_KEY_CLIENT", CLIENT_KEY)
    monkeypatch.setenv("CASCADE_TEST_KEY_OTHER", OTHER_KEY)
    held = Pacer(first=True)  # the first compaction's briefing, until the test lets it come
    model = Model(fast_pacer=held)
    fake_upstream.default = model
    s = Stack(tmp_path, db_dsn, fake_upstream, summarize=summarize)
    path = tmp_path / "agents.json"
    cfg = json.loads(path.read_text())
    with s:
        path.write_text(json.dumps({**cfg, "auth": {"keys": KEYS}}))
        s.proxy.state("config").reload()
        agent = Agent(s.client(SID))
        for i, size in enumerate(sizes):
            agent.say(words(size, f"t{i}"))
        s.replied(SID)
        first: list[httpx.Response] = []
        running = _post(s.proxy.origin, OTHER_KEY, f"/v1/sessions/{SID}/compact", None, first)
        wait_until(lambda: len(model.fast_times) == 1, 10, "the first compaction's call")
        agent.say(meanwhile)  # more to fold once the first compaction is done
        s.replied(SID)
        sent = len(s.main_bodies())
        body = {"model": MAIN, "messages": [*agent.messages, last], "stream": stream}
        second: list[httpx.Response] = []
        waiting = _post(s.proxy.origin, CLIENT_KEY, "/v1/chat/completions", body, second)
        time.sleep(0.4)  # it took the session and waits for the first's compaction
        if narrow:  # the key stays, limited to another agent than the session's
            agents = {**cfg["agents"], "other": {}}
            limited = [{**KEYS[0], "agents": ["other"]}, KEYS[1]]
            path.write_text(json.dumps({**cfg, "agents": agents, "auth": {"keys": limited}}))
        else:
            path.write_text(json.dumps({**cfg, "auth": {"keys": KEYS[1:]}}))
        s.proxy.state("config").reload()
        held.allow(20)
        running.join(15)
        waiting.join(15)
        assert first and first[0].status_code == 200, first[0].text if first else "no answer"
        assert second, "no answer"
        time.sleep(0.6)  # a poll of the claim lands at most 0.5 s after it is freed
        if fixed is not None:  # the key gets its agents back; the client sends it again
            fixed += [len(model.fast_times), len(s.main_bodies())]  # as it was refused
            path.write_text(json.dumps({**cfg, "auth": {"keys": KEYS}}))
            s.proxy.state("config").reload()
            _post(s.proxy.origin, CLIENT_KEY, "/v1/chat/completions", body, second).join(20)
        return s, model, second, sent


@pytest.mark.parametrize("stream", [False, True])
def test_a_compact_command_waiting_for_another_when_its_key_is_removed_compacts_nothing(
    tmp_path: Path,
    db_dsn: str,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
) -> None:
    command = {"role": "user", "content": "/compact"}
    s, model, second, _ = _revoked_while_waiting(
        tmp_path,
        db_dsn,
        fake_upstream,
        monkeypatch,
        command,
        stream=stream,
        summarize={"keepRecent": 2},
    )
    if stream:  # its keep-alives began: the 401 is the stream's error frame
        assert second[0].status_code == 200
        assert '"code":"invalid_api_key"' in second[0].text.replace(" ", ""), second[0].text
        assert second[0].text.rstrip().endswith("data: [DONE]")
        assert "[cascade] Compacted" not in second[0].text
    else:
        assert second[0].status_code == 401, second[0].text
        assert second[0].json()["error"]["code"] == "invalid_api_key"
        assert second[0].headers.get("www-authenticate") == "Bearer"  # as the gate's 401
    assert len(model.fast_times) == 1, "the compaction ran for a revoked key"


def test_a_chat_over_the_hard_threshold_waiting_when_its_key_is_removed_calls_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = {"role": "user", "content": words(1500, "big")}  # over 0.6 of 4000 after it too
    summarize = {"keepRecent": 2, "softFraction": 0.6, "hardFraction": 0.6}
    s, model, second, sent = _revoked_while_waiting(
        tmp_path,
        db_dsn,
        fake_upstream,
        monkeypatch,
        big,
        stream=False,
        summarize=summarize,
        sizes=(300, 300, 800),  # the first compaction folds the first two turns
        meanwhile=words(200, "m"),
    )
    assert second[0].status_code == 401, second[0].text
    assert len(model.fast_times) == 1, "a compaction ran for a revoked key"
    assert len(s.main_bodies()) == sent, "the provider was called for a revoked key"


def test_a_chat_over_the_hard_threshold_waiting_when_its_key_is_narrowed_calls_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key a reload limits to other agents than its session's meanwhile is held to them
    as a revoked key is: the 403 ``agent_not_allowed``, nothing sent for it. The refused
    chat keeps the messages it stored as it took the session (README, "Proxy keys"): its
    resend, once the key has its agents back, answers and finds them stored, not stored
    a second time."""
    big = {"role": "user", "content": words(1500, "big")}
    summarize = {"keepRecent": 2, "softFraction": 0.6, "hardFraction": 0.6}
    refused: list[int] = []
    s, _, second, sent = _revoked_while_waiting(
        tmp_path,
        db_dsn,
        fake_upstream,
        monkeypatch,
        big,
        stream=False,
        summarize=summarize,
        sizes=(300, 300, 800),
        meanwhile=words(200, "m"),
        narrow=True,
        fixed=refused,
    )
    assert second[0].status_code == 403, second[0].text
    assert second[0].json()["error"]["code"] == "agent_not_allowed"
    assert f"session {SID!r}" in second[0].json()["error"]["message"]  # as at the session's take
    assert refused == [1, sent], "a compaction ran, or the provider was called, for it"
    assert second[1].status_code == 200, second[1].text  # the resend, the key fixed
    (stored,) = s.query(
        "SELECT count(*) AS n FROM messages WHERE session_id = $1 AND message->>'content' = $2",
        SID,
        big["content"],
    )
    assert stored["n"] == 1, "the resent message was stored twice"
