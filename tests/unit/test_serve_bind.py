"""``serve``'s own bind (proxy/server.py): the address is the server's before its lifespan."""

from __future__ import annotations

import socket

import pytest

from proxy.server import bind


def test_a_second_start_on_the_same_port_fails_at_its_bind() -> None:
    """Regression: bound but not yet listening, a second start's bind succeeded too (both set
    ``SO_REUSEADDR``), and it failed only as uvicorn listened, after its start-up block."""
    first = bind("127.0.0.1", 0, 16)
    try:
        port = first[0].getsockname()[1]
        with pytest.raises(OSError):
            bind("127.0.0.1", port, 16)
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # waits in the backlog
            pass
    finally:
        for sock in first:
            sock.close()
