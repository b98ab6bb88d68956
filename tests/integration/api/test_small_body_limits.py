"""The session and memory routes that take a small JSON body (branch, add a fact, accept a
suggestion) hold it to their own fixed limit: the 413 names that limit, not
``CASCADE_MAX_BODY_BYTES`` (which governs chat and embeddings), and a body streamed without
a length is cut off at the limit, not read whole first."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.api.conftest import ProxyServer
from tests.integration.api.sessions_helpers import chat, settled, user

ROUTES = ["/v1/sessions/s1/branch", "/v1/memory", "/v1/memory/suggestions/1/accept"]


@pytest.mark.parametrize("path", ROUTES)
def test_a_large_body_gets_a_413_naming_the_routes_own_limit(http: httpx.Client, path: str) -> None:
    chat(http, [user("hi")], sid="s1")
    settled(http, "s1", 2)
    resp = http.post(path, json={"id": "s2", "scope": "global", "text": "x" * 70_000})
    assert resp.status_code == 413, resp.text
    message = resp.json()["error"]["message"]
    assert "65536 bytes" in message and "CASCADE_MAX_BODY_BYTES" not in message, message


@pytest.mark.parametrize("path", ["/v1/sessions/s1/branch", "/v1/memory/suggestions/1/accept"])
def test_a_body_streamed_without_a_length_is_cut_off_at_the_limit(
    proxy: ProxyServer, path: str
) -> None:
    # The body may be left out on these routes; a check for one read all of it first, with
    # no limit, before the limit was applied: a chunked body never ended was waited for.
    url = urlsplit(proxy.origin)
    with socket.create_connection((url.hostname, url.port), timeout=5) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sk-test-client\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        chunk = b"x" * 16_384
        try:
            for _ in range(16):  # 256 KiB, the body never finished
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except OSError:  # the server answered and closed while we were still sending
            pass
        sock.settimeout(3)
        head = sock.recv(200)
    assert head.startswith(b"HTTP/1.1 413"), head
