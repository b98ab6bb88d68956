"""What a session's reset and delete do to what memory and retrieval hold of it (README
Decisions, "A session's reset and delete, and memory"): its facts are the tenant's and stay;
its pending suggestions stay through a reset (events stay) and go with a delete; its
embeddings go with its messages, both times."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import wait_until
from tests.integration.api.conftest import write_config
from tests.integration.api.memory_suggestions import suggest
from tests.integration.conftest import column

SID = "life"


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        context={"memoryPromotion": {"mode": "suggest"}, "retrieval": {"enabled": True}},
    )


def _embedded(dsn: str) -> int:
    return int(column(dsn, "SELECT count(*) FROM message_embeddings WHERE session_id = $1", SID)[0])


def _say(http: httpx.Client, messages: list[dict[str, str]], text: str) -> None:
    messages.append({"role": "user", "content": text})
    r = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": SID},
        json={"model": "m", "messages": messages},
    )
    assert r.status_code == 200, r.text
    messages.append({"role": "assistant", "content": "ok"})


def test_reset_and_delete_keep_the_facts_and_drop_the_embeddings(
    http: httpx.Client, db_dsn: str
) -> None:
    messages: list[dict[str, str]] = []
    for text in ("We listen on port 8443.", "We build with uv."):
        _say(http, messages, text)
    wait_until(lambda: _embedded(db_dsn) >= 3, timeout=20, what="embeddings")
    suggest(db_dsn, SID, "kept", ["The port is 8443."])
    assert http.post("/v1/memory/suggestions/kept/accept").status_code == 200
    suggest(db_dsn, SID, "pending", ["The build uses uv."])

    assert http.post(f"/v1/sessions/{SID}/reset").status_code == 200
    assert _embedded(db_dsn) == 0
    pending = http.get("/v1/memory/suggestions", params={"session_id": SID}).json()["data"]
    assert [s["id"] for s in pending] == ["pending"]

    _say(http, [], "Start again.")
    wait_until(lambda: _embedded(db_dsn) >= 1, timeout=20, what="embeddings")
    assert http.delete(f"/v1/sessions/{SID}").status_code == 200
    assert _embedded(db_dsn) == 0
    assert http.get("/v1/memory/suggestions").json()["data"] == []
    assert http.post("/v1/memory/suggestions/pending/accept").status_code == 404
    facts = http.get("/v1/memory").json()["data"]
    assert [(f["text"], f["source_session"]) for f in facts] == [("The port is 8443.", SID)]
