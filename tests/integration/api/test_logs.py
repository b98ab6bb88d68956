"""Logs an operator can use, through the real proxy: one access line per request, request ids,
each error once with its cause, JSON when asked, and never a body, a key or a secret."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.common import free_port
from proxy.logs import JsonFormatter, TextFormatter
from proxy.settings import Settings
from tests.fakes.replies import error, rate_limited, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, Records, wait_for, write_config

SECRET_KEY = "sk-SECRET-BEARER-7f3a9c"
SECRET_TEXT = "SECRET-BODY-c41d2e"
MESSAGES = [{"role": "user", "content": f"my password is {SECRET_TEXT}"}]


def _post(http: httpx.Client, path: str = "/v1/chat/completions", **kwargs: Any) -> httpx.Response:
    return http.post(path, **kwargs)


def test_one_access_line_per_request_with_its_fields(
    http: httpx.Client, fake_upstream: FakeUpstream, records: Records
) -> None:
    fake_upstream.script(
        reply("slow", first_byte_delay=0.1), reply("stream", chunks=3, chunk_delay=0.1)
    )
    whole = _post(
        http,
        json={"model": "gpt-fake", "messages": MESSAGES},
        headers={"x-session-id": "logged", "x-request-id": "client-req-1"},
    )
    streamed = _post(
        http,
        json={"model": "gpt-fake", "messages": MESSAGES, "stream": True},
        headers={"x-session-id": "logged"},
    )
    health = http.get("/healthz?token=x")
    assert whole.status_code == streamed.status_code == health.status_code == 200
    # the order they were written in: a response's line follows its last byte (and the
    # reply's storing), so the next request's line may come first
    by_id = {line["request_id"]: line for line in records.access(3)}
    first, second, third = (by_id[r.headers["x-request-id"]] for r in (whole, streamed, health))
    assert first == {
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "duration_ms": first["duration_ms"],
        "upstream_ms": first["upstream_ms"],
        "session_id": "logged",
        "request_id": "client-req-1",
    }
    assert first["duration_ms"] >= first["upstream_ms"] >= 100
    # a stream's upstream time runs until its last chunk, not until its headers
    assert second["duration_ms"] >= second["upstream_ms"] >= 200
    assert second["session_id"] == "logged" and second["status"] == 200
    assert third["path"] == "/healthz" and third["upstream_ms"] == 0  # no query string
    assert third["session_id"] is None
    time.sleep(0.2)
    assert len([r for r in records.records if r.name == "cascade.access"]) == 3  # once each
    assert not records.errors()  # and nothing else


def test_the_request_id_is_the_clients_when_sane_else_generated_and_echoed(
    http: httpx.Client, records: Records
) -> None:
    given = http.get("/healthz", headers={"x-request-id": "trace-42.a:b"})
    assert given.headers["x-request-id"] == "trace-42.a:b"
    generated = [http.get("/healthz").headers["x-request-id"] for _ in range(2)]
    assert generated[0] != generated[1]
    assert all(re.fullmatch(r"[0-9a-f]{32}", g) for g in generated)
    for bad in ("has space", "x" * 200):
        assert http.get("/healthz", headers={"x-request-id": bad}).headers["x-request-id"] not in (
            bad,
            "",
        )
    ids = {line["request_id"] for line in records.access(5)}
    assert {"trace-42.a:b", *generated} <= ids


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def down(settings: Settings, tmp_path: Path) -> Iterator[tuple[ProxyServer, int]]:
    """A proxy whose provider is a closed port on loopback, logging at debug."""
    port = _closed_port()
    config = write_config(tmp_path / "down.json", f"http://127.0.0.1:{port}/v1")
    server = ProxyServer(
        settings.model_copy(update={"config": config, "log_level": "debug", "watch_config": False})
    ).start()
    yield server, port
    server.stop()


def _client(server: ProxyServer) -> httpx.Client:
    return httpx.Client(
        base_url=server.origin, timeout=10, headers={"authorization": f"Bearer {SECRET_KEY}"}
    )


def test_each_error_is_logged_once_with_its_cause(
    down: tuple[ProxyServer, int], records: Records
) -> None:
    server, port = down
    with _client(server) as http:
        bad = _post(http, json={"model": "gpt-fake", "messages": []})
        missing = _post(http, "/v1/chat/completion", json={"messages": MESSAGES})
        unreachable = _post(
            http, json={"model": "gpt-fake", "messages": MESSAGES}, headers={"x-session-id": "down"}
        )
    assert (bad.status_code, missing.status_code, unreachable.status_code) == (400, 404, 502)
    records.access(3)
    errors = records.errors()
    assert [(r.levelno, r.getMessage().split(":")[0]) for r in errors] == [
        (logging.INFO, "400 POST /v1/chat/completions"),
        (logging.INFO, "404 POST /v1/chat/completion"),
        (logging.WARNING, "502 POST /v1/chat/completions"),
    ]
    assert "'messages' must be a non-empty array" in errors[0].getMessage()
    gone = errors[2].getMessage()
    assert f"127.0.0.1:{port}" in gone  # the provider
    assert "(cause: " in gone and "refused" in gone.lower()  # and why
    assert errors[2].exc_info is None  # a provider's failure is not a traceback of ours


def test_an_error_sent_in_band_in_a_stream_is_logged_once_too(
    settings: Settings, fake_upstream: FakeUpstream, tmp_path: Path, records: Records
) -> None:
    # Past the 0.3 s keep-alive the 200 is committed: the error can only go in-band, and the
    # access line says 200, so the log must say what happened.
    provider = {"baseUrl": fake_upstream.url, "timeoutSeconds": 0.6, "connectTimeoutSeconds": 1}
    config = write_config(tmp_path / "slow.json", fake_upstream.url, providers={"openai": provider})
    server = ProxyServer(settings.model_copy(update={"config": config})).start()
    fake_upstream.script(reply("late", first_byte_delay=1.5), reply("cut", reset_after=1))
    body = {"model": "gpt-fake", "messages": MESSAGES, "stream": True}
    try:
        with _client(server) as http:
            late = _post(http, json=body, headers={"x-session-id": "late"})
            cut = _post(http, json=body, headers={"x-session-id": "cut"})
    finally:
        server.stop()
    assert late.status_code == cut.status_code == 200
    assert '"error"' in late.text and '"error"' in cut.text
    records.access(2)
    lines = [r.getMessage() for r in records.errors()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("504 in a stream") and "(cause: " in lines[0]
    assert lines[1].startswith("a stream from the provider 'openai' at http://127.0.0.1:")
    assert "ended with an error event: the provider's stream" in lines[1]


def test_a_provider_error_the_proxy_relays_is_logged_once_naming_the_provider(
    http: httpx.Client, fake_upstream: FakeUpstream, records: Records
) -> None:
    # The client gets the provider's own answer; the operator gets who answered what (the
    # access line alone says 429 or 503 with nothing to tell a provider's from the proxy's).
    fake_upstream.script(rate_limited(7), error(503))
    fake_upstream.script(error(500), endpoint="/v1/models")
    body = {"model": "gpt-fake", "messages": MESSAGES}
    whole = _post(http, json=body, headers={"x-session-id": "relayed"})
    streamed = _post(http, json={**body, "stream": True}, headers={"x-session-id": "relayed"})
    models = http.get("/v1/models")
    assert (whole.status_code, streamed.status_code, models.status_code) == (429, 503, 500)
    records.access(3)
    where = f"the provider 'openai' at http://127.0.0.1:{fake_upstream.port}"
    assert [(r.levelno, r.getMessage()) for r in records.errors()] == [
        (logging.INFO, f"{where} answered 429; relayed to the client"),
        (logging.WARNING, f"{where} answered 503; relayed to the client"),
        (logging.WARNING, f"{where} answered 500; relayed to the client"),
    ]


def test_an_invalid_session_id_is_logged_without_its_value(
    http: httpx.Client, records: Records
) -> None:
    # The value came from a header or a body: the client is told it, the log is not.
    sent = f"not an id {SECRET_TEXT}"
    body = {"model": "gpt-fake", "messages": MESSAGES}
    in_header = _post(http, json=body, headers={"x-session-id": sent})
    in_metadata = _post(http, json={**body, "metadata": {"session_id": sent}})
    assert in_header.status_code == in_metadata.status_code == 400
    assert SECRET_TEXT in in_header.json()["error"]["message"]  # the client sees what it sent
    records.access(2)
    assert [r.getMessage() for r in records.errors()] == [
        "400 POST /v1/chat/completions: Invalid session id from the X-Session-Id header",
        "400 POST /v1/chat/completions: Invalid session id from metadata.session_id",
    ]


def test_a_refused_last_event_id_is_logged_without_its_value(
    http: httpx.Client, fake_upstream: FakeUpstream, records: Records
) -> None:
    # The header's (or the query's) value is the client's: quoted to it, never logged.
    fake_upstream.script(reply("ok"))
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
    assert _post(http, json=body, headers={"x-session-id": "ev-log"}).status_code == 200
    sent = f"x{SECRET_TEXT}"
    in_header = http.get("/v1/sessions/ev-log/events", headers={"last-event-id": sent})
    in_query = http.get("/v1/sessions/ev-log/events", params={"last_event_id": sent})
    past = http.get("/v1/sessions/ev-log/events", headers={"last-event-id": "9" * 25})
    assert in_header.status_code == in_query.status_code == past.status_code == 400
    assert SECRET_TEXT in in_header.json()["error"]["message"]  # the client sees what it sent
    records.access(4)
    assert [r.getMessage() for r in records.errors()] == [
        "400 GET /v1/sessions/ev-log/events: Last-Event-ID is not an event id",
        "400 GET /v1/sessions/ev-log/events: last_event_id is not an event id",
        "400 GET /v1/sessions/ev-log/events: Last-Event-ID is past any event id",
    ]


def test_a_refused_memory_scope_is_logged_without_its_value(
    http: httpx.Client, records: Records
) -> None:
    """Regression: the 400 of a memory scope quoted it in the log line too, a query's value
    (``GET /v1/memory?scope=``) or a body's (``POST /v1/memory``)."""
    listed = http.get("/v1/memory", params={"scope": f"x {SECRET_TEXT}"})
    added = http.post("/v1/memory", json={"scope": f"x {SECRET_TEXT}", "text": "a fact"})
    unknown = http.post("/v1/memory", json={"scope": f"agent:{SECRET_TEXT}", "text": "a fact"})
    assert listed.status_code == added.status_code == unknown.status_code == 400
    assert SECRET_TEXT in unknown.json()["error"]["message"]  # the client sees what it sent
    records.access(3)
    shape = "scope must be 'global' or 'agent:<name>' (an agent's name, 1 to 256 characters)"
    assert [r.getMessage() for r in records.errors()] == [
        f"400 GET /v1/memory: {shape}",
        f"400 POST /v1/memory: {shape}",
        "400 POST /v1/memory: no agent in the config has the scope sent: a fact of it would "
        "reach no prompt",
    ]


def _capture() -> tuple[logging.Handler, logging.Handler, io.StringIO, io.StringIO]:
    text, js = io.StringIO(), io.StringIO()
    as_text, as_json = logging.StreamHandler(text), logging.StreamHandler(js)
    as_text.setFormatter(TextFormatter())
    as_json.setFormatter(JsonFormatter())
    return as_text, as_json, text, js


def _access_lines(js: io.StringIO) -> list[str]:
    return [line for line in js.getvalue().splitlines() if '"cascade.access"' in line]


def test_no_body_key_or_secret_reaches_the_log_and_json_lines_parse(
    down: tuple[ProxyServer, int],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    settings: Settings,
) -> None:
    as_text, as_json, text, js = _capture()
    root = logging.getLogger()
    root.addHandler(as_text)
    root.addHandler(as_json)
    up = ProxyServer(settings.model_copy(update={"log_level": "debug"})).start()
    fake_upstream.script(reply("fine"), reply("fine"))
    try:
        body = {"model": "gpt-fake", "messages": MESSAGES}
        for server in (down[0], up):
            with _client(server) as http:
                _post(http, json={**body, "tools": SECRET_TEXT})  # 400
                _post(http, content=f'{{"messages": [{SECRET_TEXT}'.encode())  # 400, bad JSON
                _post(http, "/v1/chat/nope", json=body)  # 404
                _post(http, json=body)  # 502 (down) or 200
                _post(http, json={**body, "stream": True})  # 502 (down) or 200
                http.get("/v1/sessions/nobody/messages")  # 404
        # an access line is written once its request's handling ends, after the answer
        assert wait_for(lambda: len(_access_lines(js)) >= 12, timeout=10), _access_lines(js)
    finally:
        up.stop()
        root.removeHandler(as_text)
        root.removeHandler(as_json)
    logged = text.getvalue() + js.getvalue()
    assert "cascade.access" in logged and "502 POST" in logged and "400 POST" in logged
    assert SECRET_KEY not in logged and SECRET_TEXT not in logged
    assert "my password" not in logged  # nor the rest of the body
    lines = js.getvalue().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)


Command = Callable[[int], list[str]]
LOG_CONFIG = Path(__file__).resolve().parents[3] / "config" / "logging-json.json"


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(
            lambda port: [
                "-m",
                "uvicorn",
                "proxy.app:create_app",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            id="uvicorn",
        ),
        pytest.param(lambda port: ["-m", "proxy", "serve", "--port", str(port)], id="serve"),
        pytest.param(  # uvicorn's supervisor logs before any app exists: the file covers it
            lambda port: [
                "-m",
                "uvicorn",
                "proxy.app:create_app",
                "--factory",
                "--port",
                str(port),
                "--workers",
                "2",
                "--log-config",
                str(LOG_CONFIG),
            ],
            id="uvicorn-workers",
        ),
    ],
)
def test_json_format_makes_every_line_the_process_writes_json(
    command: Command,
    db_dsn: str,
    config_path: Path,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": db_dsn,
        "CASCADE_CONFIG": str(config_path),
        "CASCADE_LOG_FORMAT": "json",
        "CASCADE_WATCH_CONFIG": "false",
        "CASCADE_HOST": "127.0.0.1",
    }
    out = tmp_path / "out.log"
    fake_upstream.script(reply("json"))
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, *command(port)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"{base}/healthz", timeout=1)
                    break
                except httpx.TransportError:
                    assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
                    time.sleep(0.1)
            body = {"model": "gpt-fake", "messages": MESSAGES}
            assert httpx.post(f"{base}/v1/chat/completions", json=body).status_code == 200
            assert httpx.post(f"{base}/v1/chat/completions", json={}).status_code == 400
            assert httpx.get(f"{base}/nope").status_code == 404
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=20)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    loggers = {line["logger"] for line in lines}
    assert {"uvicorn.error", "cascade.access", "cascade"} <= loggers, loggers
    assert "uvicorn.access" not in loggers
    if "--workers" in command(port):  # the supervisor's own lines are there, as JSON
        assert any(line["message"].startswith("Started parent process") for line in lines)
    access = [line for line in lines if line["logger"] == "cascade.access"]
    # an access line is written once the request's handling ends, after its response was
    # sent: the requests sent after the chat's answer may be logged before it
    assert sorted(a["status"] for a in access if a["path"] != "/healthz") == [200, 400, 404]
