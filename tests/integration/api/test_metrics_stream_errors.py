"""A provider stream that failed in its body, its status a 200, is a failed provider call in
``cascade_upstream_errors_total`` as one that broke off is: an error event in it
(``error_answer``, OpenAI's overloaded ``server_error`` mid-answer), or a stream that ended
cleanly but short (no finish reason, no ``[DONE]``: ``UpstreamBadResponse``, its error
frame's code). Uncounted, a provider failing every stream this way showed no error at all:
the request is a 200 and the call's status too."""

from __future__ import annotations

import json

import httpx

from tests.fakes.replies import Pacer, raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.test_metrics import CHAT_ROUTE, post_chat, scrape

_CHUNK = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial "}}],
}
_FAILURE = {"error": {"message": "overloaded", "type": "server_error", "code": None}}


def test_a_stream_failed_in_its_body_is_a_failed_provider_call(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    start = f"data: {json.dumps(_CHUNK)}\n\n"
    fake_upstream.script(
        raw(start, f"data: {json.dumps(_FAILURE)}\n\n", "data: [DONE]\n\n"),
        raw(start),
    )
    for sid in ("in-band", "cut-short"):
        resp = post_chat(proxy.origin, CHAT_ROUTE, sid, stream=True)
        assert resp.status_code == 200 and '"error"' in resp.text, resp.text
    errors = {
        s.labels["error_type"]: s.value
        for s in scrape(proxy.origin).samples
        if s.name == "cascade_upstream_errors_total"
    }
    assert errors == {"error_answer": 1, "UpstreamBadResponse": 1}


def test_a_whole_success_holding_an_error_or_no_completion_is_a_failed_provider_call(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """The same for a whole answer: an error object sent with a 200 (``error_answer``), or a
    body that is no chat completion (``UpstreamBadResponse``); the client gets its 502."""
    as_json = {"content-type": "application/json"}
    fake_upstream.script(
        raw(json.dumps(_FAILURE), headers=as_json), raw("<html>login</html>", headers={})
    )
    for sid in ("whole-error", "whole-html"):
        assert post_chat(proxy.origin, CHAT_ROUTE, sid).status_code == 502
    errors = {
        s.labels["error_type"]: s.value
        for s in scrape(proxy.origin).samples
        if s.name == "cascade_upstream_errors_total"
    }
    assert errors == {"error_answer": 1, "UpstreamBadResponse": 1}


def test_a_client_that_leaves_mid_stream_fails_no_provider_call(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A stream its client hung up on ends short too, with no finish reason or ``[DONE]``
    read: that is the client's doing, no failure of the provider's, and counts as none."""
    pacer = Pacer(20)  # the provider's first frame comes, the rest waits on the test
    fake_upstream.script(reply("a long answer in parts", chunks=5, pacer=pacer))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": "Bearer sk-test-client", "x-session-id": "gone-mid-stream"}
    with (
        httpx.Client(base_url=proxy.origin, headers=headers, timeout=10) as http,
        http.stream("POST", CHAT_ROUTE, json=body) as resp,
    ):
        assert resp.status_code == 200
        assert next(line for line in resp.iter_lines() if line.startswith("data:"))
    assert wait_for(lambda: fake_upstream.disconnects)
    pacer.allow(100)
    ended = wait_for(  # the call's end is counted once the proxy closed its stream
        lambda: (m := scrape(proxy.origin)).value("cascade_upstream_duration_seconds_count") and m
    )
    assert ended, "the provider call never ended"
    assert [s for s in ended.samples if s.name == "cascade_upstream_errors_total"] == []


def test_a_stream_ended_by_its_finish_reason_alone_is_no_failed_call(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """A provider that closes its stream with no ``[DONE]`` (older llama.cpp servers, some
    gateways), its finish reason in a chunk of its own after the content, answered whole:
    no error frame, and no failed call. One that sends neither is cut short (above)."""
    finish = {**_CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {**_CHUNK, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    fake_upstream.script(
        raw(f"data: {json.dumps(_CHUNK)}\n\n", f"data: {json.dumps(finish)}\n\n"),
        raw(*(f"data: {json.dumps(c)}\n\n" for c in (_CHUNK, finish, usage))),
    )
    for sid in ("no-done", "no-done-usage"):
        resp = post_chat(proxy.origin, CHAT_ROUTE, sid, stream=True)
        assert resp.status_code == 200 and '"error"' not in resp.text, resp.text
    samples = scrape(proxy.origin).samples
    assert [s for s in samples if s.name == "cascade_upstream_errors_total"] == []
