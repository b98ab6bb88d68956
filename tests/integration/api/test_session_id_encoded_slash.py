"""A session id percent-encoded with a ``/`` in it names no session route.

The server decodes ``%2F`` before routing, so ``/v1/sessions/s%2Freset`` reached the reset
route of session ``s``: a client that quotes an id (``quote(id, safe="")``, the console's
``encodeURIComponent``) and holds a bad one, ``s/reset``, reset, branched or read another
session. An id that holds ``/`` is no session's, so the path is the 404 ``unknown_url``
that ``/v1/sessions/a%2Fb`` already was; so is the same under ``/s/{id}/v1/``.
"""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.sessions_helpers import (
    MODEL,
    assert_openai_404,
    chat,
    config_path,  # noqa: F401  (the module's config)
    settled,
    user,
)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/sessions/s%2Fmessages"),
        ("GET", "/v1/sessions/s%2fevents"),
        ("POST", "/v1/sessions/s%2Freset"),
        ("POST", "/v1/sessions/s%2Fbranch"),
        ("POST", "/v1/sessions/s%2Fcompact"),
        ("GET", "/v1/sessions/s%2Ftool-outputs/call_0"),
    ],
)
def test_an_encoded_slash_in_the_id_reaches_no_other_session(
    http: httpx.Client, method: str, path: str
) -> None:
    chat(http, [user("hello")], sid="s")
    settled(http, "s", 2)
    resp = http.request(method, path)
    assert_openai_404(resp)
    assert resp.json()["error"]["code"] == "unknown_url"
    assert http.get("/v1/sessions/s").json()["message_count"] == 2  # not reset
    assert [s["id"] for s in http.get("/v1/sessions").json()["data"]] == ["s"]  # no branch


def test_an_encoded_slash_in_a_tool_call_id_still_pages_from_its_session(
    http: httpx.Client,
) -> None:
    chat(http, [user("hello")], sid="s")
    settled(http, "s", 2)
    resp = http.get("/v1/sessions/s/tool-outputs/functions%2Fread%2F0")
    assert_openai_404(resp)  # no such result, in the session that exists
    assert resp.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/s/s%2Fv1/chat/completions"),
        ("GET", "/s/s%2Fv1/models"),
        ("POST", "/s/s%2Fv1/embeddings"),
    ],
)
def test_an_encoded_slash_in_a_base_url_id_names_no_session(
    http: httpx.Client, fake_upstream: FakeUpstream, method: str, path: str
) -> None:
    """``/s/s%2Fv1/chat/completions`` (the id ``s/v1`` quoted into a base URL without its
    ``/v1``) was a chat on session ``s``."""
    chat(http, [user("hello")], sid="s")
    settled(http, "s", 2)
    sent = len(fake_upstream.requests)
    resp = http.request(method, path, json={"model": MODEL, "messages": [user("hi")]})
    assert_openai_404(resp)
    assert resp.json()["error"]["code"] == "unknown_url"
    assert "x-session-id" not in resp.headers
    assert len(fake_upstream.requests) == sent
    assert http.get("/v1/sessions/s").json()["message_count"] == 2


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/sessions/s%2Freset"), ("DELETE", "/v1/sessions/s%2Fmessages")],
)
def test_an_encoded_slash_is_no_other_routes_405(
    http: httpx.Client, method: str, path: str
) -> None:
    """The decoded path is another route's (reset takes POST): its 405 named the methods of
    a route the id never named."""
    resp = http.request(method, path)
    assert_openai_404(resp)
    assert resp.json()["error"]["code"] == "unknown_url" and "allow" not in resp.headers
