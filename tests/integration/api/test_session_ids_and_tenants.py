"""Sessions and tenants (DESIGN §4), over real HTTP: where a request's session id comes from
(derived, path, header, metadata) and which ids are refused, and that one id is a separate
session per tenant, invisible to the others."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.sessions_helpers import (
    MODEL,
    assert_openai_404,
    chat,
    config_path,  # noqa: F401  (the module's config: a small maxChars)
    messages_of,
    settled,
    tool_history,
    user,
)


@pytest.fixture
def other(proxy: ProxyServer) -> Iterator[httpx.Client]:
    """A client with a different bearer token: another pass-through tenant."""
    headers = {"authorization": "Bearer sk-someone-else"}
    with httpx.Client(base_url=proxy.origin, headers=headers, timeout=10) as c:
        yield c


def test_derived_id_is_stable_across_turns(http: httpx.Client) -> None:
    history = [{"role": "system", "content": "be brief"}, user("first question")]
    first = chat(http, history)
    sid = first.headers["x-session-id"]
    assert sid.startswith("auto-")
    settled(http, sid, 3)
    answer = first.json()["choices"][0]["message"]
    second = chat(http, [*history, answer, user("follow-up")])
    assert second.headers["x-session-id"] == sid
    assert settled(http, sid, 5)["superseded_count"] == 0
    # a conversation with another opening lands elsewhere
    third = chat(http, [{"role": "system", "content": "be brief"}, user("other question")])
    assert third.headers["x-session-id"] not in (sid, "")
    assert third.headers["x-session-id"].startswith("auto-")


def test_first_match_wins_path_then_header_then_metadata(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    meta = {"metadata": {"session_id": "m-id", "keep": "me"}}
    resp = chat(http, [user("a")], url="/s/p-id/v1/chat/completions", sid="h-id", **meta)
    assert resp.headers["x-session-id"] == "p-id"
    resp = chat(http, [user("b")], sid="h-id", **meta)
    assert resp.headers["x-session-id"] == "h-id"
    resp = chat(http, [user("c")], **meta)
    assert resp.headers["x-session-id"] == "m-id"
    for sid, text in (("p-id", "a"), ("h-id", "b"), ("m-id", "c")):
        settled(http, sid, 2)
        assert messages_of(http, sid)[0]["message"]["content"] == text
    # metadata.session_id is the proxy's; the rest of metadata goes upstream untouched
    assert [b["metadata"] for b in fake_upstream.bodies()] == [{"keep": "me"}] * 3


def test_streamed_response_carries_session_id(http: httpx.Client) -> None:
    body = {"model": MODEL, "messages": [user("hi")], "stream": True}
    with http.stream(
        "POST", "/v1/chat/completions", json=body, headers={"x-session-id": "streamed"}
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["x-session-id"] == "streamed"
        text = resp.read().decode()
    assert text.rstrip().endswith("data: [DONE]")
    assert http.get("/v1/sessions/streamed").json()["message_count"] == 2


def test_invalid_session_id_is_400(http: httpx.Client, fake_upstream: FakeUpstream) -> None:
    body = {"model": MODEL, "messages": [user("hi")]}
    for bad in ("has space", "x" * 129, "semi;colon"):
        resp = http.post("/v1/chat/completions", json=body, headers={"x-session-id": bad})
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "invalid_session_id"
    meta = {**body, "metadata": {"session_id": "bad id"}}
    assert http.post("/v1/chat/completions", json=meta).status_code == 400
    assert http.post("/s/bad%20id/v1/chat/completions", json=body).status_code == 400
    assert fake_upstream.bodies() == []


@pytest.mark.parametrize("dots", [".", ".."])
def test_dot_segment_ids_are_400(
    http: httpx.Client, fake_upstream: FakeUpstream, dots: str
) -> None:
    """Regression: ``.`` and ``..`` matched the id pattern, so a chat or a branch made such a
    session, but clients (httpx, curl, browsers) resolve them out of a URL path
    (``/v1/sessions/..`` is ``/v1/``), so the session API could not reach it."""
    body = {"model": MODEL, "messages": [user("hi")]}
    for resp in (
        http.post("/v1/chat/completions", json=body, headers={"x-session-id": dots}),
        http.post("/v1/chat/completions", json={**body, "metadata": {"session_id": dots}}),
        http.post(f"/s/{dots.replace('.', '%2E')}/v1/chat/completions", json=body),
        http.get(f"/v1/sessions/{dots.replace('.', '%2e')}"),
    ):
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["code"] == "invalid_session_id"
    assert fake_upstream.bodies() == []
    chat(http, [user("hi")], sid="dots-source")
    branched = http.post("/v1/sessions/dots-source/branch", json={"id": dots})
    assert branched.status_code == 400, branched.text
    assert [s["id"] for s in http.get("/v1/sessions").json()["data"]] == ["dots-source"]


# --------------------------------------------------------------------------- tenants


def test_same_session_id_is_separate_per_tenant(http: httpx.Client, other: httpx.Client) -> None:
    chat(http, [user("mine")], sid="shared")
    chat(other, [user("theirs"), {"role": "assistant", "content": "x"}, user("more")], sid="shared")
    assert settled(http, "shared", 2)["superseded_count"] == 0
    assert settled(other, "shared", 4)["superseded_count"] == 0
    assert messages_of(http, "shared")[0]["message"]["content"] == "mine"
    assert messages_of(other, "shared")[0]["message"]["content"] == "theirs"


def test_other_tenant_gets_404_everywhere(
    proxy: ProxyServer, http: httpx.Client, other: httpx.Client
) -> None:
    chat(http, [*tool_history()], sid="private")
    settled(http, "private", 4)
    assert [s["id"] for s in other.get("/v1/sessions").json()["data"]] == []
    base = "/v1/sessions/private"
    for method, path in [
        ("GET", base),
        ("GET", f"{base}/messages"),
        ("GET", f"{base}/events"),
        ("GET", f"{base}/tool-outputs/call_ls"),
        ("POST", f"{base}/branch"),
        ("POST", f"{base}/reset"),
        ("DELETE", base),
    ]:
        assert_openai_404(other.request(method, path))
    # nothing the other tenant tried changed the session
    mine = http.get(base).json()
    assert mine["message_count"] == 4
    assert http.get(f"{base}/tool-outputs/call_ls").status_code == 200
    assert [s["id"] for s in http.get("/v1/sessions").json()["data"]] == ["private"]
    # a request without a bearer token is a tenant of its own, too
    with httpx.Client(base_url=proxy.origin, timeout=10) as anon:
        assert_openai_404(anon.get(base))


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("sess-é-ü".encode(), "'sess-é-ü'"),  # UTF-8 reads as UTF-8, not as Latin-1 'Ã©'
        ("a\u202eb".encode(), "'a\\u202eb'"),  # a control (bidi override) is escaped
        (b"a\tb", "'a\\tb'"),
        (b"bad-\xff", "b'bad-\\xff' (not UTF-8)"),  # no text: the bytes, escaped
    ],
)
def test_an_invalid_header_id_is_shown_readably(
    http: httpx.Client, fake_upstream: FakeUpstream, raw: bytes, shown: str
) -> None:
    """Regression: the 400 showed a UTF-8 header as Latin-1 mojibake ('sess-Ã©-Ã¼'), as
    ASGI hands header values over."""
    body = {"model": MODEL, "messages": [user("hi")]}
    resp = http.post("/v1/chat/completions", json=body, headers={"x-session-id": raw})
    assert resp.status_code == 400, resp.text
    message = resp.json()["error"]["message"]
    assert message.startswith(f"Invalid session id {shown} from the X-Session-Id header"), message
    assert fake_upstream.bodies() == []
