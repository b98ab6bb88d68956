"""A grep of a large stored tool output runs off the event loop: it reads every line of
up to ``rawCapBytes`` of text to count the hits, and on the loop the proxy answered no
other request, another tenant's health check included, until it was done."""

from __future__ import annotations

import threading
import time

import httpx

from tests.integration.api.sessions_helpers import (
    chat,
    config_path,  # noqa: F401  (the module's config)
    settled,
    user,
)


def test_other_requests_are_answered_while_a_big_grep_runs(http: httpx.Client) -> None:
    big = "".join(f"row {i:07d} " + "x" * 80 + "\n" for i in range(60_000))
    call = {"id": "call_big", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
    tool = {"role": "tool", "tool_call_id": "call_big", "content": big}
    chat(http, [user("go"), {"role": "assistant", "content": None, "tool_calls": [call]}, tool])
    sid = http.get("/v1/sessions").json()["data"][0]["id"]
    settled(http, sid, 4)
    url = f"/v1/sessions/{sid}/tool-outputs/call_big"
    done = threading.Event()
    waits: list[float] = []

    def ping() -> None:
        with httpx.Client(base_url=str(http.base_url), timeout=10) as other:
            while not done.is_set():
                t = time.monotonic()
                assert other.get("/healthz").status_code == 200
                waits.append(time.monotonic() - t)
                time.sleep(0.01)

    pinger = threading.Thread(target=ping)
    pinger.start()
    try:
        time.sleep(0.05)
        t = time.monotonic()
        assert http.get(url, params={"grep": "x"}).status_code == 200
        took = time.monotonic() - t
    finally:
        done.set()
        pinger.join()
    assert took > 0.3, took  # long enough that a stalled loop shows in the pings
    assert max(waits) < took / 4, (max(waits), took)
