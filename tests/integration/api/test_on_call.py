"""README's On call table, failure by failure, through the real proxy: each failure a
request meets is exactly one line (besides its access line) carrying the request's id, at
the level the table says, with the words an operator greps for, and moves the metric the
table names. Lines are taken as the JSON formatter writes them, when written, since a line's
``request_id`` is the request's in force then."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.logs import JsonFormatter
from tests.fakes.replies import Responder, error, raw, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for, write_config
from tests.integration.api.test_metrics import Samples

KEY = "on-call-key-5f1e2d"
AUTH = {"authorization": f"Bearer {KEY}"}
SESSION_ROUTE = "/s/{session_id}/v1/chat/completions"
_JSON = {"content-type": "application/json"}


class Lines(logging.Handler):
    """Each record as its JSON line, formatted as it is emitted."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))

    def of(self, request_id: str) -> list[dict[str, Any]]:
        """The request's lines but its access line, once that is written (its last)."""
        mine = lambda: [x for x in self.lines if x.get("request_id") == request_id]  # noqa: E731
        wait_for(lambda: any(x["logger"] == "cascade.access" for x in mine()))
        return [x for x in mine() if x["logger"] != "cascade.access"]


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def config_path(
    tmp_path: Path, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The default agent's provider is the fake; ``slow``'s gives up after 0.3 s; ``down``'s
    listens nowhere. A proxy key, so a wrong one is refused."""
    monkeypatch.setenv("ON_CALL_KEY", KEY)
    down = f"http://127.0.0.1:{_closed_port()}/v1"
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        providers={
            "openai": {"baseUrl": fake_upstream.url, "timeoutSeconds": 10},
            "slow": {"baseUrl": fake_upstream.url, "timeoutSeconds": 0.3},
            "down": {"baseUrl": down, "connectTimeoutSeconds": 1},
        },
        agents={
            "default": {"provider": "openai", "fastModel": "fast-model"},
            "slow": {"provider": "slow"},
            "down": {"provider": "down"},
        },
        auth={"keys": [{"keyEnv": "ON_CALL_KEY", "tenant": "ops"}]},
    )


def _value(m: Samples, name: str, **labels: str) -> float:
    found = [
        s.value
        for s in m.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return float(sum(found))


def _chat(proxy: ProxyServer, rid: str, model: str = "gpt-4o", **kw: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **kw}
    headers = {**AUTH, "x-request-id": rid}
    return httpx.post(f"{proxy.origin}/s/oncall/v1/chat/completions", json=body, headers=headers)


def _stalled(_req: Any) -> Any:
    return reply("late", first_byte_delay=5)


# name: (the provider's answer, model, stream?, level, words, the upstream error_type)
PROVIDER_FAULTS: dict[str, tuple[Responder | None, str, bool, str, str, tuple[str, str]]] = {
    "429": (error(429), "gpt-4o", False, "INFO", "answered 429; relayed", ("openai", "429")),
    "500": (error(500), "gpt-4o", False, "WARNING", "answered 500; relayed", ("openai", "500")),
    "bad JSON": (
        raw("not json", headers=_JSON),
        "gpt-4o",
        False,
        "WARNING",
        "not a JSON chat completion",
        ("openai", "UpstreamBadResponse"),
    ),
    "stream cut": (
        reply("a b c d e f", chunks=6, reset_after=3),
        "gpt-4o",
        True,
        "WARNING",
        "ended with an error event: the provider's stream broke off (ReadError)",
        ("openai", "ReadError"),
    ),
    "slow": (_stalled, "slow", False, "WARNING", "did not answer in time", ("slow", "unreachable")),
    "down": (
        None,
        "down",
        False,
        "WARNING",
        "could not reach the provider 'down'",
        ("down", "unreachable"),
    ),
}


@pytest.mark.parametrize("name", list(PROVIDER_FAULTS))
def test_a_provider_fault_is_one_line_and_one_counted_error(
    proxy: ProxyServer, fake_upstream: FakeUpstream, lines: Lines, name: str
) -> None:
    answer, model, stream, level, words, (provider, error_type) = PROVIDER_FAULTS[name]
    if answer is not None:
        fake_upstream.script(answer)
    before = scrape_with_key(proxy)
    rid = f"fault-{name.replace(' ', '-')}"
    _chat(proxy, rid, model, stream=stream)
    (line,) = lines.of(rid)
    assert line["level"] == level and words in line["message"], line
    assert line["session_id"] == "oncall"
    after = scrape_with_key(proxy)
    labels = {"provider": provider, "error_type": error_type}
    moved = _value(after, "cascade_upstream_errors_total", **labels)
    assert moved - _value(before, "cascade_upstream_errors_total", **labels) == 1


def test_a_wrong_key_is_one_info_line_and_a_401_by_route(proxy: ProxyServer, lines: Lines) -> None:
    headers = {"authorization": "Bearer not-a-key", "x-request-id": "wrong-key"}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    resp = httpx.post(f"{proxy.origin}/s/oncall/v1/chat/completions", json=body, headers=headers)
    assert resp.status_code == 401
    (line,) = lines.of("wrong-key")
    assert line["level"] == "INFO" and "missing or unknown API key" in line["message"]
    labels = {"route": SESSION_ROUTE, "status": "401"}
    assert _value(scrape_with_key(proxy), "cascade_requests_total", **labels) == 1


def test_an_unknown_tool_output_is_one_info_line(proxy: ProxyServer, lines: Lines) -> None:
    assert _chat(proxy, "first").status_code == 200
    url = f"{proxy.origin}/v1/sessions/oncall/tool-outputs/call_nope"
    resp = httpx.get(url, headers={**AUTH, "x-request-id": "unknown-output"})
    assert resp.status_code == 404
    (line,) = lines.of("unknown-output")
    assert line["level"] == "INFO" and "no stored output for tool call" in line["message"]


def scrape_with_key(proxy: ProxyServer) -> Samples:
    resp = httpx.get(f"{proxy.origin}/metrics", headers=AUTH)
    assert resp.status_code == 200
    return Samples(resp.text)


def test_a_forced_compaction_that_fails_is_one_warning(
    proxy: ProxyServer, fake_upstream: FakeUpstream, lines: Lines
) -> None:
    """Its fast model fails each attempt: each is an INFO line, the compaction's failure
    one WARNING, its 502's, naming the cause. Each attempt was a WARNING of its own, so one
    failure read as several."""
    turns = [{"role": "user", "content": f"question {i} " + "word " * 50} for i in range(8)]
    history = [m for t in turns for m in (t, {"role": "assistant", "content": "answer " * 50})]
    body = {"model": "gpt-4o", "messages": [*history, {"role": "user", "content": "hi"}]}
    url = f"{proxy.origin}/s/oncall/v1/chat/completions"
    assert httpx.post(url, json=body, headers=AUTH).status_code == 200
    fake_upstream.script(error(500), error(500), error(500))
    url = f"{proxy.origin}/v1/sessions/oncall/compact"
    resp = httpx.post(url, headers={**AUTH, "x-request-id": "compact-fails"}, timeout=20)
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "summary_failed"
    said = lines.of("compact-fails")
    (warning,) = [x for x in said if x["level"] != "INFO"]
    assert warning["level"] == "WARNING"
    assert "the compaction failed: fast model answered 500" in warning["message"]
    attempts = [x for x in said if "attempt" in x["message"]]
    assert len(attempts) == 3 and all(x["level"] == "INFO" for x in attempts)


def test_a_client_gone_mid_stream_is_no_error_line_nor_counted_error(
    proxy: ProxyServer, fake_upstream: FakeUpstream, lines: Lines
) -> None:
    """The table's "client gone mid-stream" row: its access line says ``client_gone``, and
    nothing else is written for it nor counted as a provider's error."""
    fake_upstream.script(reply("one two three four five six", chunks=6, chunk_delay=0.2))
    before = _value(scrape_with_key(proxy), "cascade_upstream_errors_total")
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {**AUTH, "x-request-id": "gone"}
    url = f"{proxy.origin}/s/oncall/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=10) as resp:
        assert resp.status_code == 200
        next(resp.iter_lines())  # the answer began; the user stops it
    assert lines.of("gone") == []
    (access,) = [x for x in lines.lines if x.get("request_id") == "gone"]
    assert access["client_gone"] is True
    assert _value(scrape_with_key(proxy), "cascade_upstream_errors_total") == before


def test_a_stream_cut_short_is_a_200_and_an_unknown_output_a_404_by_route(
    proxy: ProxyServer, fake_upstream: FakeUpstream, lines: Lines
) -> None:
    """The table's metric column for two rows: the broken stream is counted by the 200 that
    went out, the unknown tool output's 404 by its route's template, never its path."""
    fake_upstream.script(reply("a b c d e f", chunks=6, reset_after=3))
    assert _chat(proxy, "cut", stream=True).status_code == 200
    lines.of("cut")
    url = f"{proxy.origin}/v1/sessions/oncall/tool-outputs/call_nope"
    assert httpx.get(url, headers=AUTH).status_code == 404
    m = scrape_with_key(proxy)
    assert _value(m, "cascade_requests_total", route=SESSION_ROUTE, status="200") == 1
    (route,) = {
        s.labels["route"]
        for s in m.samples
        if s.name == "cascade_requests_total" and s.labels.get("status") == "404"
    }
    assert route == "/v1/sessions/{session_id}/tool-outputs/{tool_call_id}", route
