"""The session event stream across a SIGKILL: ``cascade-proxy serve`` killed while a client
reads a session's events during a tool loop, and started again on the same database and
port. The client reconnects as the console's reader does (``proxy/ui/static/api.js``,
``followEvents``): with ``Last-Event-ID`` the last ``id:`` it read, a resume token's frame
included. Every stored event of the session reaches it, none more than twice. The restarted
process's SIGTERM then ends its event streams at once (one process's two starts serve both)."""

from __future__ import annotations

import collections
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import write_config
from tests.integration.conftest import column
from tests.reliability.conftest import ProxyProcess

pytestmark = pytest.mark.timeout(120)  # a proxy process started twice, a lease waited out

AUTH = {"authorization": "Bearer sk-test-client"}
SHORT_LEASE = {"CASCADE_LEASE_TTL_SECONDS": "3"}  # the killed process's lease, waited out

SID = "tool-loop"


class Follower(threading.Thread):
    """Reads the session's events over and over: each frame's ``id`` to ``ids``, its last
    ``id:`` (a frame with no data's too) sent back on the reconnect, as the console does."""

    def __init__(self, origin: str) -> None:
        super().__init__(daemon=True)
        self.origin = origin
        self.ids: list[int] = []
        self.last: str | None = None
        self.cuts = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            headers = {**AUTH, "accept": "text/event-stream"}
            if self.last:
                headers["last-event-id"] = self.last
            try:
                with (
                    httpx.Client(base_url=self.origin, timeout=httpx.Timeout(2, connect=1)) as c,
                    c.stream("GET", f"/v1/sessions/{SID}/events", headers=headers) as r,
                ):
                    if r.status_code != 200:
                        time.sleep(0.1)
                        continue
                    self._read(r)
            except (httpx.TransportError, httpx.StreamError):
                self.cuts += 1
                time.sleep(0.1)

    def _read(self, r: httpx.Response) -> None:
        fields: dict[str, str] = {}
        for line in r.iter_lines():
            if self.done.is_set():
                return
            if line == "":
                if "id" in fields:
                    self.last = fields["id"]
                    if "data" in fields:
                        self.ids.append(int(fields["id"]))
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")


def _turn(origin: str, history: list[dict[str, Any]], i: int) -> bool:
    """One round of a tool loop: the model's call, the tool's result, the model's answer;
    whether it was answered (the kill cuts one)."""
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    body = history + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"output {i} " * 40},
    ]
    try:
        r = httpx.post(
            f"{origin}/v1/chat/completions",
            timeout=30,
            headers={**AUTH, "x-session-id": SID},
            json={"model": "gpt-4o", "messages": body},
        )
    except httpx.TransportError:
        return False
    if r.status_code != 200:
        return False
    history[:] = body + [r.json()["choices"][0]["message"]]
    return True


def _loop(origin: str, history: list[dict[str, Any]], turns: int, stop: threading.Event) -> None:
    """``turns`` answered rounds, one after the other, a failed one (the kill) tried again."""
    i = answered = 0
    while answered < turns and not stop.is_set():
        i += 1
        if _turn(origin, history, i):
            answered += 1
        else:
            time.sleep(0.1)


def test_a_reader_of_the_events_across_a_sigkill_gets_each_once_or_twice(
    fake_upstream: FakeUpstream, db_dsn: str, tmp_path: Path
) -> None:
    fake_upstream.default = reply("done")
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    p = ProxyProcess(config, db_dsn, tmp_path / "proxy.log", SHORT_LEASE).start()
    history: list[dict[str, Any]] = [{"role": "user", "content": "run the tool"}]
    _turn(p.origin, history, 0)
    follower = Follower(p.origin)
    follower.start()
    stop = threading.Event()
    writer = threading.Thread(target=_loop, args=(p.origin, history, 12, stop), daemon=True)
    writer.start()
    try:
        deadline = time.monotonic() + 10
        while len(follower.ids) < 9:  # three rounds' events read, more on their way
            assert time.monotonic() < deadline, follower.ids
            time.sleep(0.005)
        p.kill()  # mid-loop: the follower's connection, and maybe a round, cut
        p.start()  # the same port and database
        writer.join(60)
        assert not writer.is_alive()
        stored = [
            int(i)
            for i in column(db_dsn, "SELECT id FROM events WHERE session_id = $1 ORDER BY id", SID)
        ]
        deadline = time.monotonic() + 15
        while not set(stored) <= set(follower.ids):
            assert time.monotonic() < deadline, sorted(set(stored) - set(follower.ids))
            time.sleep(0.05)
        _stop_ends_streams_at_once(p)
    finally:
        stop.set()
        follower.done.set()
        follower.join(5)
        p.stop()
    counts = collections.Counter(follower.ids)
    assert set(counts) == set(stored)  # nothing but the session's
    assert max(counts.values()) <= 2, counts
    assert follower.cuts >= 1  # the kill cut it


def _stop_ends_streams_at_once(p: ProxyProcess) -> None:
    """SIGTERM: ``serve``'s app finds its own server's stop (``stopping.serving``) and ends
    its event streams, sse-starlette's process-wide stop being off; the process exits."""
    headers = {**AUTH, "accept": "text/event-stream"}
    with (
        httpx.Client(base_url=p.origin, timeout=httpx.Timeout(5, connect=1)) as c,
        c.stream("GET", f"/v1/sessions/{SID}/events", headers=headers) as r,
    ):
        lines = r.iter_lines()
        assert ": live" in lines
        assert p.proc is not None
        p.proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert all(line.startswith(":") or not line for line in lines)  # then its end
        assert time.monotonic() - started < 2.0
    assert p.proc.wait(10) is not None
