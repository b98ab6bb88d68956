"""Regression: a proxy key limited to some agents, ``default`` among them, could name any
session of its tenant in the models and embeddings routes under ``/s/{id}/`` (or in
``X-Session-Id``), one of an agent it may not use included: the call went to the provider,
and the answer, the access line and the trace named that session as the key's. Every route
that names a session of another agent is now the session API's 403 for such a key; a
session it may use, or one that does not exist yet, passes as before."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy
from tests.integration.api.limited_keys import FULL, LIMITED, client, start_with_limited_key

CALLS = [
    ("GET", "/s/{}/v1/models"),
    ("GET", "/s/{}/v1/models/gpt-4o-mini"),
    ("POST", "/s/{}/v1/embeddings"),
    ("GET", "/v1/models", "header"),
]
EMBED = {"model": "text-embedding-3-small", "input": "hi"}


@pytest.fixture
def origin(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """A key limited to ``reviewer`` and ``default`` (the models' and embeddings' agent),
    and sessions ``coder-run`` and ``reviewer-run`` made by the unlimited key."""
    limited_to = ("reviewer", "default")
    proxy = start_with_limited_key(start_proxy, fake_upstream, tmp_path, monkeypatch, limited_to)
    with client(proxy.origin, FULL) as http:
        for agent in ("coder", "reviewer"):
            body = {"model": agent, "messages": [{"role": "user", "content": "hi"}]}
            made = http.post(
                "/v1/chat/completions", json=body, headers={"x-session-id": f"{agent}-run"}
            )
            assert made.status_code == 200, made.text
    return proxy.origin


def _call(http: httpx.Client, method: str, path: str, sid: str, *how: str) -> httpx.Response:
    headers = {"x-session-id": sid} if how else {}
    body = EMBED if method == "POST" else None
    return http.request(method, path.format(sid), json=body, headers=headers)


@pytest.mark.parametrize("call", CALLS, ids=[" ".join(c) for c in CALLS])
def test_a_limited_key_names_no_session_of_another_agent_in_models_or_embeddings(
    origin: str, fake_upstream: FakeUpstream, call: tuple[str, ...]
) -> None:
    with client(origin, LIMITED) as limited:
        sent = len(fake_upstream.requests)
        refused = _call(limited, *call[:2], "coder-run", *call[2:])
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("request_forbidden", "agent_not_allowed")
        assert "coder-run" in error["message"]
        assert len(fake_upstream.requests) == sent  # nothing went to the provider
        for sid in ("reviewer-run", "not-made-yet"):
            passed = _call(limited, *call[:2], sid, *call[2:])
            assert passed.status_code != 403, (sid, passed.text)
            assert passed.headers["x-session-id"] == sid
            assert len(fake_upstream.requests) == sent + 1  # the provider answered it
            sent += 1
    with client(origin, FULL) as full:  # a key without ``agents`` names any session
        assert _call(full, *call[:2], "coder-run", *call[2:]).status_code != 403
        assert len(fake_upstream.requests) == sent + 1
