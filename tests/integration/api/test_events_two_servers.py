"""Two servers in one process (the tests, an embedding): one's stop ends its own session
event streams and begins its own stop's grace, and leaves the other's streams open and its
grace unbegun. sse-starlette's stop is one flag for the process (``AppStatus.should_exit``),
which uvicorn's ``handle_exit`` set for any server: every server's streams ended with it,
and every app's grace began (``proxy/stopping.py``)."""

from __future__ import annotations

import signal
import time

import pytest
from sse_starlette.sse import AppStatus

from proxy.settings import Settings
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.test_events import chat, is_usage, open_events, user


def test_one_servers_stop_ends_its_streams_alone(settings: Settings) -> None:
    here = ProxyServer(settings).start()
    there = ProxyServer(settings.model_copy(update={"watch_config": False})).start()
    try:
        chat(here.origin, "one", [user("u1")])
        with open_events(here.origin, "one") as ending, open_events(there.origin, "one") as kept:
            ending.until(is_usage)
            kept.until(is_usage)
            here._server.handle_exit(signal.SIGTERM, None)  # as the signal does
            started = time.monotonic()
            with pytest.raises(AssertionError, match="event stream ended"):
                ending.next()  # its own stream ends at its stop, without waiting for it
            assert time.monotonic() - started < 1.0
            here.stop()
            chat(
                there.origin,
                "one",
                [user("u1"), {"role": "assistant", "content": "ok"}, user("u2")],
            )
            assert kept.until(is_usage)  # the other's stream goes on
            assert there.state("stop").deadline is None  # and its grace has not begun
        assert wait_for(lambda: here.state("stop").deadline is not None)
    finally:
        AppStatus.should_exit = False  # an older sse-starlette's process-wide stop
        here.stop()
        there.stop()
