"""Two whole answers that together pass ``CASCADE_MAX_HELD_ANSWER_BYTES``: the one arriving
second waits for room, and when none frees up in time its client gets the 503
``server_busy`` with ``Retry-After`` (the SDKs retry it), while the first is answered. The
budget is the app's (its ``Upstream``'s, made in its lifespan): two apps in one process
(tests, a host embedding the proxy) each hold their own."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from proxy import answer_budget
from tests.fakes.replies import raw
from tests.fakes.upstream import CHAT, FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

_WHOLE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-fake",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
}


def test_a_whole_answer_past_the_budget_is_a_503_its_client_retries(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 0.2)
    proxy = start_proxy(
        write_config(tmp_path / "a.json", fake_upstream.url), max_held_answer_bytes=2000
    )
    # each answer alone fits (1500 blanks, then the completion 1.5 s later); two do not
    slow = [b" " * 1500, json.dumps(_WHOLE).encode()]
    json_type = {"content-type": "application/json"}
    fake_upstream.script(
        *(raw(*slow, headers=json_type, chunk_delay=1.5) for _ in range(2)), endpoint=CHAT
    )
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}

    def ask(session: str) -> httpx.Response:
        with httpx.Client(base_url=proxy.origin, timeout=10) as http:
            return http.post("/v1/chat/completions", json=body, headers={"x-session-id": session})

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(ask, ["one", "two"]))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200, 503], [a.text for a in answers]
    busy = next(a for a in answers if a.status_code == 503)
    assert busy.headers["retry-after"] == "1"
    assert busy.json()["error"]["code"] == "server_busy"
    assert "CASCADE_MAX_HELD_ANSWER_BYTES" in busy.json()["error"]["message"]


def test_two_apps_in_one_process_each_have_their_own_budget(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same two answers as above, one to each of two apps: both are answered, where a
    budget shared by the process would refuse one of them."""
    monkeypatch.setattr(answer_budget, "WAIT_SECONDS", 0.2)
    config = write_config(tmp_path / "a.json", fake_upstream.url)
    proxies = [start_proxy(config, max_held_answer_bytes=2000) for _ in range(2)]
    slow = [b" " * 1500, json.dumps(_WHOLE).encode()]
    json_type = {"content-type": "application/json"}
    fake_upstream.script(
        *(raw(*slow, headers=json_type, chunk_delay=1.0) for _ in range(2)), endpoint=CHAT
    )
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}

    def ask(origin: str, session: str) -> httpx.Response:
        with httpx.Client(base_url=origin, timeout=10) as http:
            return http.post("/v1/chat/completions", json=body, headers={"x-session-id": session})

    with ThreadPoolExecutor(2) as pool:  # two sessions: one would take turns on the database
        answers = list(pool.map(ask, [p.origin for p in proxies], ["one", "two"]))
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
