"""Two tenants on one proxy, each with a session of the same id whose folded history holds a
fact the question asks after: each tenant's ``<related_context>`` block quotes its own folded
message, never the other tenant's, though the vectors share the session id and the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cascade.retrieval import RELATED_OPEN
from tests.fakes.replies import reply, tool_call
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Model, wait_until
from tests.integration.api.conftest import StartProxy, write_config
from tests.integration.conftest import column

KEYS = {"acme": "cascade-key-tenant-a-5e1d07", "globex": "cascade-key-tenant-b-90c4f2"}
FACTS = {
    "acme": "Note: the API server listens on port 8443.",
    "globex": "Note: the API server listens on port 9999.",
}
SID = "shared-run"
QUESTION = "which port does the API server listen on?"


def _chat(origin: str, tenant: str, messages: list[Any]) -> dict[str, Any]:
    resp = httpx.post(
        f"{origin}/v1/chat/completions",
        headers={"authorization": f"Bearer {KEYS[tenant]}", "x-session-id": SID},
        json={"model": "m", "messages": messages},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]["message"]  # type: ignore[no-any-return]


def _plant(origin: str, fake: FakeUpstream, tenant: str) -> list[Any]:
    """The tenant's fact, tool rounds whose results eviction clears, then a compaction."""
    model = Model()
    fake.default = model
    history: list[Any] = [{"role": "user", "content": FACTS[tenant]}]
    history.append(_chat(origin, tenant, history))
    history.append({"role": "user", "content": "now build the project"})
    for i in range(6):
        call = tool_call("sh", {"n": i}, id=f"c{i}")
        model.main = lambda req, call=call: reply(None, tool_calls=[call])
        history.append(_chat(origin, tenant, history))
        log = "\n".join(f"step {i}.{j}: compiling module_{j}.c ... done" for j in range(60))
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": log})
    model.main = lambda req: reply("built")
    history.append(_chat(origin, tenant, history))
    resp = httpx.post(
        f"{origin}/v1/sessions/{SID}/compact",
        headers={"authorization": f"Bearer {KEYS[tenant]}"},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    return history


def _embedded(dsn: str, tenant: str) -> int:
    return int(
        column(
            dsn,
            "SELECT count(*) FROM message_embeddings WHERE tenant = $1 AND session_id = $2 "
            "AND embedding IS NOT NULL",
            tenant,
            SID,
        )[0]
    )


def _stored(dsn: str, tenant: str) -> int:
    return int(
        column(
            dsn, "SELECT count(*) FROM messages WHERE tenant = $1 AND session_id = $2", tenant, SID
        )[0]
    )


def test_each_tenant_retrieves_only_its_own_folded_history(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    db_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for tenant, key in KEYS.items():
        monkeypatch.setenv(f"CASCADE_TEST_KEY_{tenant.upper()}", key)
    path = write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        auth={"keys": [{"keyEnv": f"CASCADE_TEST_KEY_{t.upper()}", "tenant": t} for t in KEYS]},
        models={"default": {"contextLimit": 8000, "reservedOutput": 500}},
        context={
            "summarize": {"keepRecent": 2, "softFraction": 0.95, "hardFraction": 0.99},
            "eviction": {
                "atFraction": 0.3,
                "keepRecentRounds": 1,
                "clearAtLeast": 300,
                "minResultTokens": 100,
            },
            "retrieval": {"enabled": True, "minScore": 0.35, "maxResults": 3},
        },
    )
    origin = start_proxy(path).origin
    histories = {tenant: _plant(origin, fake_upstream, tenant) for tenant in KEYS}
    for tenant in KEYS:
        wait_until(
            lambda t=tenant: _embedded(db_dsn, t) >= _stored(db_dsn, t) - 1,
            timeout=20,
            what=f"{tenant}'s embeddings",
        )
    for tenant, other in (("acme", "globex"), ("globex", "acme")):
        history = [*histories[tenant], {"role": "user", "content": QUESTION}]
        _chat(origin, tenant, history)
        sent = [b for b in fake_upstream.bodies() if b.get("model") != FAST][-1]["messages"]
        block = sent[-1]["content"][len(QUESTION) + 2 :]
        assert block.startswith(RELATED_OPEN) and FACTS[tenant] in block, block
        assert FACTS[other] not in json.dumps(sent)
