"""A forwarded client header that is not ASCII (a ``User-Agent`` naming a "café" agent, a
bearer with a Latin-1 byte) reaches the provider. httpx encodes a text header as ASCII, so
such a request was a 500 with a traceback at ERROR, for input the client is free to send
(HTTP allows any visible octet in a header value). httpx's transport sends the client's bytes;
aiohttp's encodes every header's text as UTF-8, so there the same text arrives in UTF-8."""

from __future__ import annotations

import http.client
import json
import logging
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, write_config


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_latin1_header_value_is_forwarded_as_sent(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    records: Records,
    tmp_path: Path,
    transport: str,
) -> None:
    server = start_proxy(
        write_config(tmp_path / "agents.json", fake_upstream.url), http_transport=transport
    )
    origin = urlsplit(server.origin)
    conn = http.client.HTTPConnection(origin.hostname or "", origin.port, timeout=10)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    # http.client writes a header's text as Latin-1, one byte per character
    conn.request(
        "POST",
        "/v1/chat/completions",
        body,
        {
            "Content-Type": "application/json",
            "Authorization": "Bearer sk-caf\xe9",
            "User-Agent": "caf\xe9-agent/1.0",
        },
    )
    answer = conn.getresponse()
    assert answer.status == 200, answer.read()
    conn.close()
    sent = fake_upstream.requests[-1].headers  # decoded by the fake as Latin-1
    for name, text in (("user-agent", "caf\xe9-agent/1.0"), ("authorization", "Bearer sk-caf\xe9")):
        wire = sent[name].encode("latin-1")
        assert wire == text.encode("latin-1" if transport == "httpx" else "utf-8")
    records.access(1)
    assert not [r for r in records.records if r.levelno >= logging.ERROR]
