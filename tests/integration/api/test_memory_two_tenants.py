"""Two tenants on one proxy (two proxy keys, the same session id in each): neither reads,
answers, deletes or has injected the other's memory facts or suggestions, through the API,
a suggestion id both hold, a fact id, or a chat on the session id both use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config
from tests.integration.api.memory_suggestions import suggest
from tests.integration.api.tenant_keys import tenant_auth

KEY_A = "cascade-key-tenant-a-7f31c0"
KEY_B = "cascade-key-tenant-b-2d94aa"
SID = "shared-run"


@pytest.fixture
def clients(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    auth = tenant_auth(monkeypatch, (KEY_A, "acme"), (KEY_B, "globex"))
    path = write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        auth=auth,
        agents={"default": {"provider": "openai"}, "coder": {"provider": "openai"}},
        context={"memoryPromotion": {"mode": "suggest"}},
    )
    origin = start_proxy(path).origin
    a = httpx.Client(base_url=origin, timeout=10, headers={"authorization": f"Bearer {KEY_A}"})
    b = httpx.Client(base_url=origin, timeout=10, headers={"authorization": f"Bearer {KEY_B}"})
    with a, b:
        yield a, b


def _chat(http: httpx.Client, text: str, model: str = "m", sid: str = SID) -> None:
    r = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": sid},
        json={"model": model, "messages": [{"role": "user", "content": text}]},
    )
    assert r.status_code == 200, r.text


def _replayed(http: httpx.Client) -> str:
    """What the session's event stream replays before it goes quiet for a second."""
    got = []
    with http.stream("GET", f"/v1/sessions/{SID}/events", timeout=1.0) as r:
        assert r.status_code == 200
        try:
            for line in r.iter_lines():
                got.append(line)
        except httpx.ReadTimeout:
            pass
    return "\n".join(got)


def test_facts_and_suggestions_stay_with_their_tenant(
    clients: tuple[httpx.Client, httpx.Client], db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    a, b = clients
    for scope in ("global", "agent:coder"):
        made = a.post("/v1/memory", json={"scope": scope, "text": f"Acme {scope} fact"})
        assert made.status_code == 201, made.text
    fact_id = made.json()["id"]
    # the same suggestion id, on the same session id, in both tenants
    suggest(db_dsn, SID, "dup", ["Acme deploys on Fridays."], agent="coder", tenant="acme")
    suggest(db_dsn, SID, "dup", ["Globex deploys on Mondays."], agent="coder", tenant="globex")
    suggest(db_dsn, SID, "acme-only", ["Acme uses uv."], agent="coder", tenant="acme")

    for scope in ("global", "agent:coder"):
        assert b.get("/v1/memory", params={"scope": scope}).json()["data"] == []
    assert b.delete(f"/v1/memory/{fact_id}").status_code == 404
    listed = b.get("/v1/memory/suggestions", params={"session_id": SID}).json()["data"]
    assert [(s["id"], s["facts"]) for s in listed] == [("dup", ["Globex deploys on Mondays."])]
    assert b.post("/v1/memory/suggestions/acme-only/accept").status_code == 404
    assert b.post("/v1/memory/suggestions/acme-only/reject").status_code == 404

    replay = _replayed(b)
    assert "Globex deploys on Mondays." in replay and "Acme" not in replay

    # B answers its own "dup": A's stays pending, and A's facts go nowhere of B's
    accepted = b.post("/v1/memory/suggestions/dup/accept")
    assert accepted.status_code == 200, accepted.text
    assert "Acme" not in accepted.text
    pending = {s["id"] for s in a.get("/v1/memory/suggestions").json()["data"]}
    assert pending == {"dup", "acme-only"}
    assert a.post("/v1/memory/suggestions/dup/reject").status_code == 200

    # a chat of B on the session id A uses carries none of A's facts
    _chat(b, "which port?", model="coder")
    system = fake_upstream.bodies()[-1]["messages"][0]["content"]
    assert "Globex deploys on Mondays." in system and "Acme" not in system
    _chat(a, "which port?", model="coder")
    system = fake_upstream.bodies()[-1]["messages"][0]["content"]
    assert "Acme agent:coder fact" in system and "Globex" not in system

    # B's reset, branch and delete of its session leave A's session and facts as they were
    held = a.get(f"/v1/sessions/{SID}/messages").json()
    _chat(a, "A's own b-copy", model="coder", sid="b-copy")
    assert b.post(f"/v1/sessions/{SID}/reset").status_code == 200
    assert b.post(f"/v1/sessions/{SID}/branch", json={"id": "b-copy"}).status_code in (200, 201)
    assert b.delete(f"/v1/sessions/{SID}").status_code == 200
    assert a.get(f"/v1/sessions/{SID}/messages").json() == held
    b_copy = b.get("/v1/sessions/b-copy/messages").json()["data"]
    a_copy = a.get("/v1/sessions/b-copy/messages").json()["data"]
    assert [m["message"]["content"] for m in a_copy][:1] == ["A's own b-copy"]
    assert "A's own b-copy" not in str(b_copy)
    assert len(a.get("/v1/memory", params={"scope": "agent:coder"}).json()["data"]) == 1
