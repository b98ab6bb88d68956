"""An error answer names the session in ``X-Session-Id`` as soon as the session is known.

README (Endpoints): every response carries ``X-Session-Id`` once the session is known, an
error's too. A session named in the path or the ``X-Session-Id`` header is known before the
body is read, so a 400 for a malformed body or a wrong field, and a 413 for a body over the
limit, carry it; an invalid id in either place is still the 400 ``invalid_session_id``.
"""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream

JSON = {"content-type": "application/json"}
BAD_BODIES = {
    "truncated JSON": b'{"model": "gpt-fake", "messages": [',
    "no messages": b'{"model": "gpt-fake"}',
    "messages not a list": b'{"model": "gpt-fake", "messages": "hi"}',
    "tools not a list": b'{"model": "gpt-fake", "tools": {}, "messages": [{"role": "user"}]}',
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_a_bad_body_answer_names_the_header_session(
    http: httpx.Client, fake_upstream: FakeUpstream, case: str
) -> None:
    resp = http.post(
        "/v1/chat/completions",
        content=BAD_BODIES[case],
        headers=JSON | {"x-session-id": "named-in-header"},
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert resp.headers.get("x-session-id") == "named-in-header"
    assert fake_upstream.requests == []


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_a_bad_body_answer_names_the_path_session(
    http: httpx.Client, fake_upstream: FakeUpstream, case: str
) -> None:
    resp = http.post(
        "/s/named-in-path/v1/chat/completions",
        content=BAD_BODIES[case],
        headers=JSON | {"x-session-id": "the-path-wins"},
    )
    assert resp.status_code == 400, resp.text
    assert resp.headers.get("x-session-id") == "named-in-path"


def test_a_body_over_the_limit_names_the_session(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    big = b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "'
    big += b"x" * (33 * 1024 * 1024) + b'"}]}'
    resp = http.post(
        "/v1/chat/completions", content=big, headers=JSON | {"x-session-id": "too-big"}
    )
    assert resp.status_code == 413, resp.text
    assert resp.headers.get("x-session-id") == "too-big"


def test_an_invalid_header_id_is_still_refused_and_not_echoed(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    resp = http.post(
        "/v1/chat/completions",
        json={"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-session-id": "has space"},
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_session_id"
    assert "x-session-id" not in resp.headers
    assert fake_upstream.requests == []


def test_a_metadata_session_is_named_once_the_body_is_read(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    ok = http.post(
        "/v1/chat/completions",
        json={
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"session_id": "from-metadata"},
        },
    )
    assert ok.status_code == 200, ok.text
    assert ok.headers.get("x-session-id") == "from-metadata"
