"""A client's field beside ``messages`` nested deeper than orjson writes (254 levels), but
within what it reads (1024): ``loads_exact``'s look for wide integers wrote those fields
with orjson, and its "Recursion limit reached" (a TypeError) answered 500.

Nested up to ``jsonio.MAX_FIELD_DEPTH`` the body goes upstream as it came (the stdlib's
writer takes it); deeper, it is the client's 400 naming the field, since no JSON writer
of the proxy could send it on. A message's content is held to the same bound."""

from __future__ import annotations

import json

import httpx

from proxy.jsonio import MAX_FIELD_DEPTH
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.reconcile_helpers import MODEL, user


def _post(http: httpx.Client, sid: str, depth: int) -> httpx.Response:
    deep = "[" * depth + "]" * depth
    body = json.dumps({"model": MODEL, "messages": [user("hi")], "x": "DEEP"})
    raw = body.replace('"DEEP"', deep).encode()
    headers = {"X-Session-Id": sid, "content-type": "application/json"}
    return http.post("/v1/chat/completions", content=raw, headers=headers)


def test_a_field_nested_past_what_orjson_writes_goes_upstream_as_it_came(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("fine"))
    answer = _post(http, "deep-most", MAX_FIELD_DEPTH)
    assert answer.status_code == 200, answer.text[:300]
    sent = fake_upstream.bodies()[-1]["x"]
    depth = 0
    while isinstance(sent, list) and sent:
        sent, depth = sent[0], depth + 1
    assert depth == MAX_FIELD_DEPTH - 1 and sent == []


def test_a_field_nested_past_the_writable_depth_is_the_clients_400(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    answer = _post(http, "deep-1020", 1020)
    assert answer.status_code == 400, answer.text[:300]
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert f"nests past {MAX_FIELD_DEPTH} levels" in error["message"], error
    assert fake_upstream.bodies() == []


def test_a_message_nested_past_what_the_hash_chain_writes_is_the_clients_400(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """A message nested 1020 levels (orjson reads it) runs the hash chain's writer out of
    recursion: the client's 400 naming ``messages``, not a 500."""
    deep = "[" * 1020 + "]" * 1020
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "DEEP"}]})
    headers = {"X-Session-Id": "deep-message", "content-type": "application/json"}
    raw = body.replace('"DEEP"', deep).encode()
    answer = http.post("/v1/chat/completions", content=raw, headers=headers)
    assert answer.status_code == 400, answer.text[:300]
    assert answer.json()["error"]["param"] == "messages", answer.text
    assert fake_upstream.bodies() == []


def test_a_message_is_held_to_the_fields_depth_not_to_the_stack_left(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """A message nested past ``MAX_FIELD_DEPTH`` but well within the recursion limit is the
    same 400 as a field that deep: its bound is not however much stack the request has left
    where the hash chain's writer, or a later one, runs."""
    deep = "[" * (MAX_FIELD_DEPTH + 88) + "]" * (MAX_FIELD_DEPTH + 88)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "DEEP"}]})
    headers = {"X-Session-Id": "deep-message-600", "content-type": "application/json"}
    raw = body.replace('"DEEP"', deep).encode()
    answer = http.post("/v1/chat/completions", content=raw, headers=headers)
    assert answer.status_code == 400, answer.text[:300]
    error = answer.json()["error"]
    assert error["param"] == "messages", error
    assert f"nests past {MAX_FIELD_DEPTH} levels" in error["message"], error
    assert fake_upstream.bodies() == []


def test_the_400_for_a_deep_field_names_the_field_and_does_not_call_the_json_invalid(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    answer = _post(http, "deep-named", MAX_FIELD_DEPTH + 1)
    assert answer.status_code == 400, answer.text[:300]
    error = answer.json()["error"]
    assert error["param"] == "x", error
    assert "'x' nests past" in error["message"], error
    assert "not valid JSON" not in error["message"], error
    assert fake_upstream.bodies() == []


def test_a_message_whose_content_nests_the_fields_depth_goes_upstream(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """The message's own level is not counted: content nested ``MAX_FIELD_DEPTH`` levels is
    taken, as a field that deep is."""
    fake_upstream.script(reply("fine"))
    deep = "[" * MAX_FIELD_DEPTH + "]" * MAX_FIELD_DEPTH
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "DEEP"}]})
    headers = {"X-Session-Id": "deep-message-512", "content-type": "application/json"}
    answer = http.post(
        "/v1/chat/completions", content=body.replace('"DEEP"', deep).encode(), headers=headers
    )
    assert answer.status_code == 200, answer.text[:300]
    assert fake_upstream.bodies()[-1]["messages"][-1]["content"] is not None


def test_a_deep_first_message_of_a_session_named_by_none_is_the_clients_400(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """With no session id sent, the id is derived from the first user message's content,
    written by ``json``: nested near what orjson reads, that ran out of recursion (a 500)
    before the hash chain's bound was reached."""
    deep = "[" * 1020 + "]" * 1020
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "DEEP"}]})
    raw = body.replace('"DEEP"', deep).encode()
    answer = http.post(
        "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400, answer.text[:300]
    error = answer.json()["error"]
    assert error["param"] == "messages", error
    assert f"nests past {MAX_FIELD_DEPTH} levels" in error["message"], error
    assert fake_upstream.bodies() == []


def test_an_embeddings_input_nested_past_the_writable_depth_is_the_clients_400(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """The embeddings route parses its body as the chat route does (``loads_exact``): an
    input nested past ``MAX_FIELD_DEPTH``, or past what the reader takes, is the client's
    400, never a 500, and is not sent; one within it goes on as it came."""
    answers = []
    for depth in (MAX_FIELD_DEPTH, MAX_FIELD_DEPTH + 1, 1020, 5000):
        deep = "[" * depth + "]" * depth
        raw = json.dumps({"model": "e", "input": "DEEP"}).replace('"DEEP"', deep).encode()
        headers = {"content-type": "application/json"}
        answers.append(http.post("/v1/embeddings", content=raw, headers=headers))
    assert answers[0].status_code == 200, answers[0].text[:300]
    for answer in answers[1:]:
        assert answer.status_code == 400, answer.text[:300]
    assert answers[1].json()["error"]["param"] == "input", answers[1].text
    assert answers[2].json()["error"]["param"] == "input", answers[2].text
    assert len(fake_upstream.requests) == 1
