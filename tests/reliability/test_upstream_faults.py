"""Upstream faults, each many times on one session, interleaved with good turns: every
fault answers as documented (README: Errors, Stored reply, A finished stream) and the
session stores exactly the good turns, never a partial or failed reply.

A provider slower than its ``timeoutSeconds`` is one the test holds (``Pacer(first=True)``,
never let go) behind an agent of its own, ``SLOW``, whose provider's timeout is short; the
good turns and the other faults go to the default agent, whose provider's timeout a loaded
machine does not reach, so a turn meant to be answered is never cut by one."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.fakes.replies import Pacer, RecordedRequest, Reply, Responder, error, raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.errors_helpers import _assert_error_shape, _closed_port
from tests.reliability.conftest import Figures, ProxyServer, write_config

SID = "faults"
ROUNDS = 3
SLOW = "slow"  # the agent (and the model that picks it) of the faults the provider holds
PATIENCE = 20.0
_JSON = {"content-type": "application/json"}
_HTML = {"content-type": "text/html; charset=utf-8"}
_SSE = {"content-type": "text/event-stream"}
BAD = "upstream_bad_response"  # the provider answered, unusably

Check = Callable[[httpx.Response], None]


def passes(status: int, retry_after: str | None) -> Check:
    def check(r: httpx.Response) -> None:
        assert r.status_code == status, r.text
        assert r.headers.get("retry-after") == retry_after
        assert r.headers["x-session-id"] == SID

    return check


def proxy_error(status: int, code: str | None = None) -> Check:
    def check(r: httpx.Response) -> None:
        _assert_error_shape(r, status, code)

    return check


def error_frame(code: str | None = None) -> Check:
    def check(r: httpx.Response) -> None:
        assert r.status_code == 200, r.text
        frames = [e for e in r.content.split(b"\n\n") if e.startswith(b"data:")]
        assert frames[-1] == b"data: [DONE]", r.content[-300:]
        err = json.loads(frames[-2][len(b"data:") :])["error"]
        assert set(err) == {"message", "type", "param", "code"}
        if code is not None:
            assert err["code"] == code

    return check


_CHUNK = (
    'data: {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",'
    ' "choices": [{"index": 0, "delta": {"role": "assistant", "content": "par"},'
    ' "finish_reason": null}]}\n\n'
)

_ERROR = (
    '{"error": {"message": "slow down", "type": "requests", "param": null,'
    ' "code": "rate_limit_exceeded"}}'
)


def held(_req: RecordedRequest) -> Reply:
    """An answer the provider never sends: the proxy's timeout ends the call (the fake then
    sees its client leave)."""
    return reply("late", pacer=Pacer(PATIENCE, first=True))


# name: (what the provider does, stream?, what the client must get); a name that starts
# with "slow" is sent to the SLOW agent
FAULTS: dict[str, tuple[Responder, bool, Check]] = {
    "429 + Retry-After": (error(429, headers={"retry-after": "7"}), False, passes(429, "7")),
    "429 + Retry-After, streamed": (
        error(429, headers={"retry-after": "7"}),
        True,
        passes(429, "7"),
    ),
    "500 + Retry-After": (error(500, headers={"retry-after": "3"}), False, passes(500, "3")),
    "503 + Retry-After, streamed": (
        error(503, headers={"retry-after": "5"}),
        True,
        passes(503, "5"),
    ),
    "slow first byte": (held, False, proxy_error(504, "upstream_timeout")),
    "slow first byte, streamed": (held, True, error_frame("upstream_timeout")),
    "stream cut mid-way": (
        reply("a long partial answer", chunks=6, reset_after=3),
        True,
        error_frame(BAD),
    ),
    "a clean end without finish_reason or [DONE] (item 2)": (
        raw(_CHUNK, headers=_SSE),
        True,
        error_frame(BAD),
    ),
    "malformed SSE after a chunk, then the end": (
        raw(_CHUNK, 'data: {"id": "x", "choi\n\n', "data: {nope}\n\n", headers=_SSE),
        True,
        error_frame(BAD),
    ),
    "malformed SSE only (no chat chunk)": (
        raw('data: {"id": "x", "choi\n\n', "data: {nope}\n\n", headers=_SSE),
        True,
        error_frame(BAD),
    ),
    "not SSE at all": (raw("hello\nworld\n", headers=_SSE), True, error_frame(BAD)),
    # a whole completion to a stream is an answer (relayed as its stream); a malformed one not
    "a malformed whole completion to a stream": (
        raw('{"id": "c1", "choices": [{"index": 0, "message": "whole"}]}', headers=_JSON),
        True,
        error_frame(BAD),
    ),
    "non-JSON 200 body": (raw("this is not json", headers=_JSON), False, proxy_error(502, BAD)),
    "HTML 200 body": (
        raw("<html><body>login</body></html>", headers=_HTML),
        False,
        proxy_error(502, BAD),
    ),
    "an error object in a 200": (raw(_ERROR, headers=_JSON), False, proxy_error(502, BAD)),
    "an error object in a 200, streamed (relayed as it came)": (
        raw(_ERROR, headers=_JSON),
        True,
        error_frame("rate_limit_exceeded"),
    ),
    "HTML 502 page": (
        raw("<html>Bad Gateway</html>", status=502, headers=_HTML),
        False,
        passes(502, None),
    ),
    "non-JSON 500 body": (
        raw("Internal Server Error", status=500, headers={"content-type": "text/plain"}),
        False,
        passes(500, None),
    ),
}


@pytest.fixture
def faulty_proxy(db_dsn: str, fake_upstream: FakeUpstream, tmp_path: Path) -> Iterator[ProxyServer]:
    def provider(timeout: float) -> dict[str, Any]:
        return {
            "baseUrl": fake_upstream.url,
            "timeoutSeconds": timeout,
            "connectTimeoutSeconds": 10,
        }

    config = write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        providers={"openai": provider(30), SLOW: provider(0.3)},
        agents={
            "default": {"provider": "openai", "fastModel": "fast-model"},
            SLOW: {"provider": SLOW},
        },
    )
    server = ProxyServer(
        Settings(database_url=db_dsn, config=config, keepalive_seconds=0.3, watch_config=False)
    ).start()
    yield server
    server.stop()


def _client(server: ProxyServer) -> httpx.Client:
    return httpx.Client(
        base_url=server.origin,
        timeout=15,
        headers={"authorization": "Bearer sk-test-client", "x-session-id": SID},
    )


def _assistants(http: httpx.Client) -> list[str]:
    rows = http.get(f"/v1/sessions/{SID}/messages").json()["data"]
    return [r["message"].get("content") for r in rows if r["role"] == "assistant"]


def test_upstream_faults_answer_as_documented_and_store_only_good_turns(
    faulty_proxy: ProxyServer, fake_upstream: FakeUpstream, figures: Figures
) -> None:
    """Upstream faults (429/500/503, timeouts, cut and malformed streams, non-JSON/HTML)."""
    history: list[dict[str, Any]] = []
    seen: Counter[str] = Counter()
    with _client(faulty_proxy) as http:
        for r in range(ROUNDS):
            for name, (responder, stream, check) in FAULTS.items():
                turn = [*history, {"role": "user", "content": f"q {r} {name}"}]
                fake_upstream.script(responder)
                model = SLOW if name.startswith("slow") else "gpt-4o"
                resp = http.post(
                    "/v1/chat/completions",
                    json={"model": model, "messages": turn, "stream": stream},
                )
                check(resp)
                seen[name] += 1
                # the same turn again, answered: the session was freed and goes on
                fake_upstream.script(reply(f"a {r} {name}"))
                good = http.post(
                    "/v1/chat/completions",
                    json={"model": "gpt-4o", "messages": turn, "stream": stream},
                )
                assert good.status_code == 200, (name, good.text)
                assert b"[DONE]" in good.content if stream else good.json()["choices"]
                history = [*turn, {"role": "assistant", "content": f"a {r} {name}"}]
        deadline = time.monotonic() + PATIENCE  # a reply is stored after it is sent
        while len(_assistants(http)) < len(history) // 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        stored = _assistants(http)
    want = [m["content"] for m in history if m["role"] == "assistant"]
    figures.add(
        tried=2 * sum(seen.values()),
        faults=sum(seen.values()),
        kinds=len(FAULTS),
        stored_replies=len(stored),
        partial_stored=len(set(stored) - set(want)),
    )
    assert stored == want  # every good turn once, no failed or partial reply


def test_a_refused_connection_is_a_502_every_time(
    db_dsn: str, fake_upstream: FakeUpstream, tmp_path: Path, figures: Figures
) -> None:
    """Connection refused: 502 upstream_unreachable."""
    config = write_config(tmp_path / "down.json", f"http://127.0.0.1:{_closed_port()}/v1")
    server = ProxyServer(
        Settings(database_url=db_dsn, config=config, keepalive_seconds=0.3, watch_config=False)
    ).start()
    try:
        with _client(server) as http:
            n = 0
            for i in range(10):
                for stream in (False, True):
                    body = {
                        "model": "gpt-4o",
                        "stream": stream,
                        "messages": [{"role": "user", "content": f"q{i}"}],
                    }
                    _assert_error_shape(
                        http.post("/v1/chat/completions", json=body), 502, "upstream_unreachable"
                    )
                    n += 1
            assert _assistants(http) == []
    finally:
        server.stop()
    figures.add(tried=n)
