"""A streamed request's keep-alive clock starts when it is accepted (``prep_wait.py``), not
when its provider is called: queued behind another request of its session, which may stream
for minutes, it commits its ``200`` one interval in and sends a comment every interval until
its own stream starts. An error its preparation raises after that is one error frame with
the error's code, then ``[DONE]``; a request ready within the interval is as it was."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import rate_limited, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records, StartProxy, wait_for
from tests.integration.api.held_session import HEADERS, hold
from tests.integration.api.sse_frames import _data_frames, _events, _payload

KEEPALIVE = b": keep-alive"
TENANT = tenant_from_bearer(HEADERS["authorization"])


@contextmanager
def _stream(
    origin: str, sid: str, texts: list[str], **extra: Any
) -> Iterator[tuple[httpx.Response, Iterator[bytes]]]:
    body = {
        "model": "gpt-fake",
        "messages": [{"role": "user", "content": t} for t in texts],
        "stream": True,
        **extra,
    }
    with httpx.Client(base_url=origin, headers=HEADERS, timeout=10) as c:
        sent = c.stream("POST", "/v1/chat/completions", json=body, headers={"x-session-id": sid})
        with sent as resp:
            yield resp, resp.iter_raw()


def _read_beats(chunks: Iterator[bytes], n: int) -> bytes:
    """What the stream sent until ``n`` keep-alive comments came (and nothing else)."""
    got = b""
    while got.count(KEEPALIVE) < n:
        got += next(chunks)
    return got


def _content(data: bytes) -> str:
    frames = [_payload(f) for f in _data_frames(data) if f != b"data: [DONE]"]
    return "".join(c["delta"].get("content") or "" for f in frames for c in f.get("choices") or [])


def test_a_stream_queued_behind_a_long_stream_gets_keep_alives(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    holder, out, pacer = hold(proxy.origin, "behind", fake_upstream)
    asked = len(fake_upstream.requests)
    fake_upstream.script(reply("second answer"))
    with _stream(proxy.origin, "behind", ["first", "second"]) as (resp, chunks):
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-session-id"] == "behind"
        beats = _read_beats(chunks, 2)  # two intervals: the holder still streams
        assert _events(beats) == [KEEPALIVE] * 2, beats
        assert len(fake_upstream.requests) == asked  # still waiting for its session
        pacer.allow(10)
        rest = b"".join(chunks)
    holder.join()
    assert out[0].status_code == 200
    assert _content(rest) == "second answer"
    assert rest.rstrip().endswith(b"data: [DONE]")


def test_an_error_after_the_200_is_one_frame_with_its_code(
    proxy: ProxyServer, fake_upstream: FakeUpstream, records: Records
) -> None:
    holder, _, pacer = hold(proxy.origin, "refused", fake_upstream)
    asked = len(fake_upstream.requests)
    # An output reserved past the window (128000): the step refuses it once it has the session.
    with _stream(proxy.origin, "refused", ["first", "x"], max_tokens=200000) as (resp, chunks):
        assert resp.status_code == 200
        _read_beats(chunks, 1)
        pacer.allow(10)
        rest = b"".join(chunks)
    holder.join()
    frames = _data_frames(rest)
    assert len(frames) == 2 and frames[1] == b"data: [DONE]", rest
    error = _payload(frames[0])["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error"
    assert "lower max_tokens" in error["message"]
    assert len(fake_upstream.requests) == asked  # refused before any provider call
    lines = [r.getMessage() for r in records.records if "after its stream began" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("400"), lines


def test_a_providers_refusal_after_an_early_200_is_a_frame_with_its_status(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    holder, _, pacer = hold(proxy.origin, "late-429", fake_upstream)
    fake_upstream.script(rate_limited(7))
    with _stream(proxy.origin, "late-429", ["first", "second"]) as (resp, chunks):
        assert resp.status_code == 200
        _read_beats(chunks, 1)
        pacer.allow(10)
        rest = b"".join(chunks)
    holder.join()
    frames = _data_frames(rest)
    assert len(frames) == 2 and frames[1] == b"data: [DONE]", rest
    error = _payload(frames[0])["error"]
    assert error["code"] == "429" and error["retry_after"] == "7"


def test_a_stream_ready_within_the_interval_sends_no_comment(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("quick", headers={"x-request-id": "up-1"}))
    with _stream(proxy.origin, "quick", ["hi"]) as (resp, chunks):
        assert resp.status_code == 200
        assert resp.headers["x-upstream-request-id"] == "up-1"  # the provider's headers
        data = b"".join(chunks)
    assert KEEPALIVE not in data
    assert _content(data) == "quick"
    # a provider's refusal within the interval is still the response's status
    fake_upstream.script(rate_limited())
    with _stream(proxy.origin, "quick", ["hi", "again"]) as (resp, chunks):
        assert resp.status_code == 429
        assert KEEPALIVE not in b"".join(chunks)


def test_a_client_that_leaves_mid_wait_frees_the_session(
    proxy: ProxyServer, fake_upstream: FakeUpstream, records: Records
) -> None:
    holder, _, pacer = hold(proxy.origin, "left", fake_upstream)
    with _stream(proxy.origin, "left", ["first", "second"]) as (resp, chunks):
        assert resp.status_code == 200
        _read_beats(chunks, 1)  # then the client closes the connection
    went = "the client went away while its request waited for the session"
    assert wait_for(lambda: any(went in r.getMessage() for r in records.records))
    assert wait_for(lambda: proxy.queued(TENANT, "left") == 1)  # only the holder is queued
    pacer.allow(10)
    holder.join()
    fake_upstream.script(reply("third answer"))
    with _stream(proxy.origin, "left", ["first", "third"]) as (resp, chunks):
        assert _content(b"".join(chunks)) == "third answer"
    assert [b["messages"][-1]["content"] for b in fake_upstream.bodies()] == ["first", "third"]


def test_the_stream_after_an_early_200_sends_its_first_comment_when_one_is_due(
    start_proxy: StartProxy, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    """The clock's last comment went out just before the session was free: the stream's own
    keep-alives go on from it, the next one interval later, not at once a second time.

    Each comment's arrival is timed rather than the comments counted: the session is free
    well within the next interval on a quiet machine, but a loaded one may take past it to
    hand the session over, and a comment is then due (it comes an interval on, not at once).
    """
    proxy = start_proxy(config_path, keepalive_seconds=1.0)
    holder, _, pacer = hold(proxy.origin, "due", fake_upstream)
    fake_upstream.script(reply("due answer"))
    with _stream(proxy.origin, "due", ["first", "second"]) as (resp, chunks):
        beats = _read_beats(chunks, 1)
        beat_times = [time.monotonic()]
        pacer.allow(10)
        rest = b""
        for chunk in chunks:
            beat_times += [time.monotonic()] * chunk.count(KEEPALIVE)
            rest += chunk
    holder.join()
    assert _content(rest) == "due answer"
    gaps = [b - a for a, b in zip(beat_times, beat_times[1:], strict=False)]
    assert all(gap > 0.5 for gap in gaps), (gaps, beats + rest)  # none at once at the start


def test_after_an_early_200_a_slow_first_token_gets_its_comment_when_due(
    start_proxy: StartProxy, config_path: Path, fake_upstream: FakeUpstream
) -> None:
    """The provider's headers came before the clock's next comment was due, its first token
    long after: that comment still goes out an interval after the clock's last, not an
    interval after the headers (the client would hear nothing for longer than it)."""
    # due 1.0 s after the last comment, against 1.75 s (0.75 + 1.0) an interval after the
    # headers: the bound between leaves each side 0.35 s of a loaded machine's delays (a
    # clock's property: no order of events tells the two apart)
    proxy = start_proxy(config_path, keepalive_seconds=1.0)
    holder, _, pacer = hold(proxy.origin, "slow", fake_upstream)
    fake_upstream.script(reply("slow", first_byte_delay=0.75, first_token_delay=2.0))
    with _stream(proxy.origin, "slow", ["first", "second"]) as (resp, chunks):
        _read_beats(chunks, 1)
        beat = time.monotonic()
        pacer.allow(10)
        nxt = next(chunks)
        gap = time.monotonic() - beat
        rest = b"".join(chunks)
    holder.join()
    assert nxt.startswith(KEEPALIVE) and gap < 1.35, (nxt, gap)
    assert _content(rest) == "slow"
