"""A proxy key a reload revokes while its request waits for its session (README, "Proxy
keys"): a chat, reset, DELETE or branch is refused as it takes the session (on its replica's
queue or polling another replica's lease), having stored or changed nothing and called no
provider, and a key the reload limits to other agents is held to those; a request of the key
already streaming runs to its end and is stored (it was let in, and its provider call
began, before the reload)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, wait_for, write_config
from tests.integration.api.sse_frames import _data_frames, _payload

KEY_A = "cascade-key-a-71c2d9"
KEY_B = "cascade-key-b-0a8e4f"
A, B = ("CASCADE_TEST_KEY_A", "team"), ("CASCADE_TEST_KEY_B", "team")


def _keys(*entries: tuple[str, str]) -> dict[str, Any]:
    return {"keys": [{"keyEnv": env, "tenant": tenant} for env, tenant in entries]}


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "x-session-id": "s"}


def _body(*texts: str) -> dict[str, Any]:
    roles = ["user", "assistant"] * len(texts)
    messages = [{"role": r, "content": t} for r, t in zip(roles, texts, strict=False)]
    return {"model": "gpt-fake", "messages": messages, "stream": True}


def _stream(
    origin: str, key: str, body: dict[str, Any], out: list[bytes], first: threading.Event
) -> None:
    with (
        httpx.Client(base_url=origin, timeout=10) as c,
        c.stream("POST", "/v1/chat/completions", json=body, headers=_auth(key)) as resp,
    ):
        assert resp.status_code == 200
        for chunk in resp.iter_raw():
            out.append(chunk)
            first.set()


def _in_thread(
    origin: str, key: str, body: dict[str, Any]
) -> tuple[threading.Thread, list[bytes], threading.Event]:
    out: list[bytes] = []
    first = threading.Event()
    thread = threading.Thread(target=_stream, args=(origin, key, body, out, first))
    thread.start()
    assert first.wait(5)  # the holder's first frame, or the waiter's first keep-alive
    return thread, out, first


def _reload(
    servers: list[ProxyServer], config: Path, fake: FakeUpstream, *entries: tuple[str, str]
) -> None:
    write_config(config, fake.url, auth=_keys(*entries))
    for server in servers:
        with httpx.Client(base_url=server.origin, timeout=10) as c:

            def gone() -> bool:  # key A no longer lists the team's session
                listed = c.get("/v1/sessions", headers=_auth(KEY_A))
                return listed.status_code == 401 or listed.json()["data"] == []

            assert wait_for(gone, 10), "the reload was not applied"


AGENTS = {"default": {"provider": "openai"}, "coder": {"provider": "openai"}}
"""Two agents: the session's (``default``) and another a reload may limit key A to."""


def _narrow_a_to_coder(servers: list[ProxyServer], config: Path, fake: FakeUpstream) -> None:
    """Reload with key A limited to agent ``coder``, and wait until each server refuses it
    the team's session (403)."""
    limited = {
        "keys": [{"keyEnv": A[0], "tenant": "team", "agents": ["coder"]}, _keys(B)["keys"][0]]
    }
    write_config(config, fake.url, auth=limited, agents=AGENTS)
    for server in servers:
        with httpx.Client(base_url=server.origin, timeout=10) as c:

            def refused() -> bool:
                return c.get("/v1/sessions/s", headers=_auth(KEY_A)).status_code == 403

            assert wait_for(refused, 10), "the reload was not applied"


@pytest.mark.parametrize(
    ("revoked", "replicas"),
    [((B,), 1), ((("CASCADE_TEST_KEY_A", "other"), B), 1), ((B,), 2)],
    ids=["removed", "moved", "removed-waiting-on-another-replica"],
)
def test_a_request_waiting_for_its_session_when_its_key_is_revoked_is_refused(
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    revoked: tuple[tuple[str, str], ...],
    replicas: int,
) -> None:
    monkeypatch.setenv(A[0], KEY_A)
    monkeypatch.setenv(B[0], KEY_B)
    config = write_config(tmp_path / "agents.json", fake_upstream.url, auth=_keys(A, B))
    servers = [start_proxy(config, watch_config=True) for _ in range(replicas)]
    server, there = servers[0], servers[-1]  # the holder's replica, the waiter's
    pacer = Pacer()
    fake_upstream.script(reply("slow answer", chunks=2, pacer=pacer))
    holder, held, _ = _in_thread(server.origin, KEY_A, _body("first"))  # streams: at the provider
    waiter, waited, _ = _in_thread(there.origin, KEY_A, _body("first", "slow answer", "second"))
    _reload(servers, config, fake_upstream, *revoked)
    pacer.allow(10)
    holder.join(10)
    waiter.join(10)
    # the stream in flight as the key went ran to its end; the waiter never reached the provider
    assert b"data: [DONE]" in b"".join(held)
    assert [b["messages"][-1]["content"] for b in fake_upstream.bodies()] == ["first"]
    frames = [f for f in _data_frames(b"".join(waited)) if f != b"data: [DONE]"]
    assert [_payload(f)["error"]["code"] for f in frames] == ["invalid_api_key"]
    # nothing of the waiter's is stored, and the holder's reply is; the tenant's key goes on
    with httpx.Client(base_url=server.origin, headers=_auth(KEY_B), timeout=10) as c:
        rows = wait_for(lambda: c.get("/v1/sessions/s/messages").json()["data"][1:])
        assert [
            m["message"]["content"] for m in c.get("/v1/sessions/s/messages").json()["data"]
        ] == [
            "first",
            "slow answer",
        ], rows
        fake_upstream.script(reply("third answer"))
        again = c.post(
            "/v1/chat/completions", json={**_body("first", "slow answer", "third"), "stream": False}
        )
        assert again.json()["choices"][0]["message"]["content"] == "third answer"


@pytest.mark.parametrize("op", ["delete", "reset", "branch"])
def test_a_session_operation_waiting_for_its_session_when_its_key_is_removed_is_refused(
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    op: str,
) -> None:
    """A DELETE, reset or branch queued behind a stream does nothing once its key is gone."""
    monkeypatch.setenv(A[0], KEY_A)
    monkeypatch.setenv(B[0], KEY_B)
    config = write_config(tmp_path / "agents.json", fake_upstream.url, auth=_keys(A, B))
    server = start_proxy(config, watch_config=True)
    pacer = Pacer()
    fake_upstream.script(reply("slow answer", chunks=2, pacer=pacer))
    holder, _, _ = _in_thread(server.origin, KEY_B, _body("first"))
    out: list[httpx.Response] = []

    def operate() -> None:
        method, path = (
            ("DELETE", "/v1/sessions/s") if op == "delete" else ("POST", f"/v1/sessions/s/{op}")
        )
        with httpx.Client(base_url=server.origin, headers=_auth(KEY_A), timeout=10) as c:
            out.append(c.request(method, path, json={"id": "copy"} if op == "branch" else None))

    waiter = threading.Thread(target=operate)
    waiter.start()
    assert wait_for(lambda: server.queued("team", "s") == 2), "the operation never queued"
    _reload([server], config, fake_upstream, B)
    pacer.allow(10)
    holder.join(10)
    waiter.join(10)
    assert out[0].status_code == 401, out[0].text
    assert out[0].json()["error"]["code"] == "invalid_api_key"
    with httpx.Client(base_url=server.origin, headers=_auth(KEY_B), timeout=10) as c:
        rows = wait_for(lambda: c.get("/v1/sessions/s/messages").json()["data"][1:])
        assert [
            m["message"]["content"] for m in c.get("/v1/sessions/s/messages").json()["data"]
        ] == [
            "first",
            "slow answer",
        ], rows
        assert c.get("/v1/sessions/copy").status_code == 404


def test_a_key_limited_by_a_reload_while_its_request_waits_is_held_to_its_new_agents(
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """The agents checked as the request takes its session are the key's in force then."""
    monkeypatch.setenv(A[0], KEY_A)
    monkeypatch.setenv(B[0], KEY_B)
    config = write_config(
        tmp_path / "agents.json", fake_upstream.url, auth=_keys(A, B), agents=AGENTS
    )
    server = start_proxy(config, watch_config=True)
    pacer = Pacer()
    fake_upstream.script(reply("slow answer", chunks=2, pacer=pacer))
    holder, _, _ = _in_thread(server.origin, KEY_B, _body("first"))
    waiter, waited, _ = _in_thread(server.origin, KEY_A, _body("first", "slow answer", "second"))
    _narrow_a_to_coder([server], config, fake_upstream)
    pacer.allow(10)
    holder.join(10)
    waiter.join(10)
    frames = [f for f in _data_frames(b"".join(waited)) if f != b"data: [DONE]"]
    assert [_payload(f)["error"]["code"] for f in frames] == ["agent_not_allowed"]
    assert [b["messages"][-1]["content"] for b in fake_upstream.bodies()] == ["first"]


def test_a_session_operation_of_a_key_limited_by_a_reload_while_it_waits_is_held_to_them(
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """A DELETE whose key a reload limits to other agents while it waits deletes nothing."""
    monkeypatch.setenv(A[0], KEY_A)
    monkeypatch.setenv(B[0], KEY_B)
    config = write_config(
        tmp_path / "agents.json", fake_upstream.url, auth=_keys(A, B), agents=AGENTS
    )
    server = start_proxy(config, watch_config=True)
    pacer = Pacer()
    fake_upstream.script(reply("slow answer", chunks=2, pacer=pacer))
    holder, _, _ = _in_thread(server.origin, KEY_B, _body("first"))
    out: list[httpx.Response] = []

    def delete() -> None:
        with httpx.Client(base_url=server.origin, headers=_auth(KEY_A), timeout=10) as c:
            out.append(c.delete("/v1/sessions/s"))

    waiter = threading.Thread(target=delete)
    waiter.start()
    assert wait_for(lambda: server.queued("team", "s") == 2), "the DELETE never queued"
    _narrow_a_to_coder([server], config, fake_upstream)
    pacer.allow(10)
    holder.join(10)
    waiter.join(10)
    assert out[0].status_code == 403, out[0].text
    assert out[0].json()["error"]["code"] == "agent_not_allowed"
    with httpx.Client(base_url=server.origin, headers=_auth(KEY_B), timeout=10) as c:
        assert c.get("/v1/sessions/s").status_code == 200


def test_a_session_operation_waiting_on_another_replica_is_held_to_the_agents_it_is_limited_to(
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    """A DELETE polling another replica's lease is held to the agents a reload limits its
    key to after each pause, as one queued on its own replica is as it takes its turn."""
    monkeypatch.setenv(A[0], KEY_A)
    monkeypatch.setenv(B[0], KEY_B)
    config = write_config(
        tmp_path / "agents.json", fake_upstream.url, auth=_keys(A, B), agents=AGENTS
    )
    servers = [start_proxy(config, watch_config=True) for _ in range(2)]
    pacer = Pacer()
    fake_upstream.script(reply("slow answer", chunks=2, pacer=pacer))
    holder, _, _ = _in_thread(servers[0].origin, KEY_B, _body("first"))
    out: list[httpx.Response] = []

    def delete() -> None:
        with httpx.Client(base_url=servers[1].origin, headers=_auth(KEY_A), timeout=10) as c:
            out.append(c.delete("/v1/sessions/s"))

    waiter = threading.Thread(target=delete)
    waiter.start()
    assert wait_for(lambda: servers[1].queued("team", "s") == 1), "the DELETE never queued"
    time.sleep(0.3)  # past its turn's ask of the key: it polls the holder's lease
    assert not out, "the DELETE did not wait"
    _narrow_a_to_coder(servers, config, fake_upstream)
    pacer.allow(10)
    holder.join(10)
    waiter.join(10)
    assert out[0].status_code == 403, out[0].text
    assert out[0].json()["error"]["code"] == "agent_not_allowed"
    with httpx.Client(base_url=servers[0].origin, headers=_auth(KEY_B), timeout=10) as c:
        assert c.get("/v1/sessions/s").status_code == 200
