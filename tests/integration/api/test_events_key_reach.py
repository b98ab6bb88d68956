"""An open event stream stays within what its proxy key reaches now, not only when it
opened: a stream can stay open for days, so a key removed from the config (revoked), or a
session that another key's request moved to an agent this key may not use, ends it, and the
client's reconnect is judged afresh (a 401, a 403). Before, such a stream went on sending
the session's events, replies included, until the client left."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cascade.types import MESSAGE_APPENDED, USAGE
from proxy.session_id import tenant_from_bearer
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, write_config
from tests.integration.api.test_events import EventStream, open_events

FULL = "cascade-key-full-0b61e2"
CODER = "cascade-key-coder-8a2f47"
AGENTS = {"default": {"provider": "openai"}, "coder": {"provider": "openai"}}
FULL_KEY = {"keyEnv": "CASCADE_TEST_FULL_KEY", "tenant": "team"}
CODER_KEY = {"keyEnv": "CASCADE_TEST_CODER_KEY", "tenant": "team", "agents": ["coder"]}


def _config(path: Path, upstream: str, keys: list[dict[str, Any]]) -> Path:
    tmp = path.with_name("next.json")
    write_config(tmp, upstream, agents=AGENTS, auth={"keys": keys})
    os.replace(tmp, path)  # as an editor saves: the watcher sees one whole file
    return path


def _chat(server: ProxyServer, key: str, model: str) -> None:
    resp = httpx.post(
        f"{server.origin}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {key}", "x-session-id": "watched"},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text


def _ends(stream: EventStream, within: float = 6.0) -> list[str | None]:
    """The events the stream sends before the server ends it (fails if it does not)."""
    seen, deadline = [], time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            seen.append(stream.next().event)
        except AssertionError:  # "event stream ended"
            return seen
        except httpx.ReadTimeout:  # nothing for READ_TIMEOUT: open and idle
            break
    raise AssertionError(f"the stream is still open after {within} s: {seen}")


@pytest.fixture
def server(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> ProxyServer:
    monkeypatch.setenv("CASCADE_TEST_FULL_KEY", FULL)
    monkeypatch.setenv("CASCADE_TEST_CODER_KEY", CODER)
    config = _config(tmp_path / "agents.json", fake_upstream.url, [FULL_KEY, CODER_KEY])
    server = start_proxy(config, watch_config=True)
    _chat(server, CODER, "coder")  # the session "watched" runs agent coder
    return server


def test_a_revoked_keys_stream_ends(
    server: ProxyServer, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    with open_events(server.origin, "watched", token=CODER) as stream:
        stream.until(lambda f: f.event == USAGE)  # replayed: subscribed
        _config(tmp_path / "agents.json", fake_upstream.url, [FULL_KEY])
        _ends(stream)
    again = httpx.get(
        f"{server.origin}/v1/sessions/watched/events",
        headers={"authorization": f"Bearer {CODER}"},
        timeout=5,
    )
    assert again.status_code == 401


def test_a_stream_ends_once_its_session_runs_an_agent_the_key_may_not_use(
    server: ProxyServer,
) -> None:
    with open_events(server.origin, "watched", token=CODER) as stream:
        stream.until(lambda f: f.event == USAGE)
        _chat(server, FULL, "default")  # the session now runs agent default
        seen = _ends(stream)
    # what the other agent's request stored is not sent: the check comes before each frame
    assert MESSAGE_APPENDED not in seen, seen
    again = httpx.get(
        f"{server.origin}/v1/sessions/watched/events",
        headers={"authorization": f"Bearer {CODER}"},
        timeout=5,
    )
    assert again.status_code == 403
    assert json.loads(again.text)["error"]["code"] == "agent_not_allowed"


def test_a_pass_through_stream_ends_once_the_config_has_proxy_keys(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream opened on a bearer token alone (pass-through) is held to the gate in force
    too: once keys are configured, that token opens nothing, though its tenant may live on
    as a key's (a key whose ``tenant`` is the token's keeps its sessions)."""
    monkeypatch.setenv("CASCADE_TEST_FULL_KEY", FULL)
    path = write_config(tmp_path / "agents.json", fake_upstream.url, agents=AGENTS)
    server = start_proxy(path, watch_config=True)
    _chat(server, "sk-before-keys", "default")
    with open_events(server.origin, "watched", token="sk-before-keys") as stream:
        stream.until(lambda f: f.event == USAGE)
        kept = {
            "keyEnv": "CASCADE_TEST_FULL_KEY",
            "tenant": tenant_from_bearer("Bearer sk-before-keys"),
        }
        _config(path, fake_upstream.url, [kept])
        _ends(stream)
    again = httpx.get(
        f"{server.origin}/v1/sessions/watched/events",
        headers={"authorization": "Bearer sk-before-keys"},
        timeout=5,
    )
    assert again.status_code == 401
