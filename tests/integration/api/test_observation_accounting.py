"""A cut observation is a cut: counted once, as truncation, and marked ``truncated``.

The observations stage stores its rewrite of an observation (a tool's output sent as a user
message, ``Observation: …``) beside the row, as eviction stores a placeholder, and emits
``context.truncated``. The shell used to add the rewrite's tokens to the session's eviction
total as well, so ``GET /v1/sessions/{id}`` counted the same cut twice (``eviction`` and
``truncation``), and ``/messages`` called the row ``evicted``, not ``truncated``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config

MAX_CHARS = 2000


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    context = {
        "toolOutput": {"maxChars": MAX_CHARS},
        "summarize": {"enabled": False},
    }
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=context)


def _chat(http: httpx.Client, messages: list[dict[str, Any]]) -> dict[str, Any]:
    r = http.post(
        "/v1/chat/completions",
        json={"model": "gpt-fake", "messages": messages},
        headers={"x-session-id": "obs"},
    )
    assert r.status_code == 200, r.text
    return dict(r.json()["choices"][0]["message"])


def test_a_cut_observation_is_counted_once_and_marked_truncated(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    observation = "Observation: " + "\n".join(f"line {j} value {j * 7}" for j in range(800))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "find the bug"}]
    messages.append(_chat(http, messages))
    messages.append({"role": "user", "content": observation})
    messages.append(_chat(http, messages))  # the observation is the latest: sent whole
    messages.append({"role": "user", "content": "go on"})
    messages.append(_chat(http, messages))  # now it is cut

    sent = fake_upstream.bodies()[-1]["messages"]
    assert len(sent[2]["content"]) <= MAX_CHARS  # it was cut

    session = http.get("/v1/sessions/obs").json()
    assert session["reclaimed"]["truncation"] > 0
    assert session["reclaimed"]["eviction"] == 0
    assert session["reclaimed_tokens"] == 0  # the eviction total

    rows = http.get("/v1/sessions/obs/messages").json()["data"]
    row = rows[2]
    assert row["tool_call_id"].startswith("obs_")
    assert row["truncated"] is True and row["evicted"] is False
    sent_rows = http.get("/v1/sessions/obs/messages", params={"form": "sent"}).json()["data"]
    assert sent_rows[2]["message"]["content"] == observation
    assert sent_rows[2]["truncated"] is True and sent_rows[2]["evicted"] is False
    # The page reads back through the session API, as for a cut tool result.
    page = http.get(f"/v1/sessions/obs/tool-outputs/{row['tool_call_id']}").json()["page"]
    assert "line 0 value 0" in page
