"""Per-session SSE (DESIGN §6): frame shape, live delivery, Last-Event-ID replay, replicas."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import httpx

from proxy.cascade.types import MESSAGE_APPENDED, USAGE
from proxy.settings import Settings
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.conftest import run_sync

__all__ = ["Frame", "EventStream", "open_events"]

MODEL = "gpt-4o"
READ_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Frame:
    event: str | None
    id: str | None
    data: Any
    raw: str


class EventStream:
    """Reads SSE frames from a streaming httpx response; comments (pings) are skipped, and
    so is a frame of a resume token alone, kept in ``last_id`` as an SSE client keeps it.

    Every read is bounded by the client's read timeout, so a missing event fails the test
    with ``httpx.ReadTimeout`` instead of hanging it.
    """

    def __init__(self, resp: httpx.Response) -> None:
        self.resp = resp
        self._lines = resp.iter_lines()
        self.last_id: str | None = None

    def next(self) -> Frame:
        fields: dict[str, list[str]] = {}
        raw: list[str] = []
        for line in self._lines:
            if line == "":
                if "id" in fields:
                    self.last_id = fields["id"][-1]
                if list(fields) == ["id"]:  # a resume token's frame
                    fields, raw = {}, []
                    continue
                if fields:
                    data = "\n".join(fields.get("data", []))
                    return Frame(
                        event=(fields.get("event") or [None])[-1],
                        id=(fields.get("id") or [None])[-1],
                        data=json.loads(data) if data else None,
                        raw="\n".join(raw),
                    )
                continue
            raw.append(line)
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))
        raise AssertionError("event stream ended")

    def until(self, done: Callable[[Frame], bool], *, max_frames: int = 50) -> list[Frame]:
        """Frames up to and including the first one ``done`` accepts."""
        frames: list[Frame] = []
        while len(frames) < max_frames:
            frames.append(self.next())
            if done(frames[-1]):
                return frames
        raise AssertionError(f"no matching frame in {[f.event for f in frames]}")

    def take(self, n: int) -> list[Frame]:
        return [self.next() for _ in range(n)]


@contextlib.contextmanager
def open_events(
    base_url: str, sid: str, *, token: str = "sk-test-client", last_event_id: str | None = None
) -> Iterator[EventStream]:
    headers = {"authorization": f"Bearer {token}", "accept": "text/event-stream"}
    if last_event_id is not None:
        headers["last-event-id"] = last_event_id
    timeout = httpx.Timeout(READ_TIMEOUT, connect=5)
    with (
        httpx.Client(base_url=base_url, timeout=timeout) as c,
        c.stream("GET", f"/v1/sessions/{sid}/events", headers=headers) as resp,
    ):
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        yield EventStream(resp)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def chat(base_url: str, sid: str, messages: list[Any], **body: Any) -> dict[str, Any]:
    with httpx.Client(headers={"authorization": "Bearer sk-test-client"}, timeout=10) as c:
        resp = c.post(
            f"{base_url}/v1/chat/completions",
            json={"model": MODEL, "messages": messages, **body},
            headers={"x-session-id": sid},
        )
    assert resp.status_code == 200, resp.text
    if body.get("stream"):
        return {}
    return resp.json()["choices"][0]["message"]


def is_usage(frame: Frame) -> bool:
    return frame.event == USAGE


def assert_well_formed(frame: Frame, sid: str) -> None:
    assert frame.event, frame.raw
    assert frame.id is not None and frame.id.isdigit(), frame.raw
    assert isinstance(frame.data, dict)
    assert frame.data["session_id"] == sid
    assert datetime.fromisoformat(frame.data["ts"]).tzinfo is not None


# --------------------------------------------------------------------------- tests


def test_frames_carry_event_id_and_json_data(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.script(reply("a1", usage=(42, 1)))
    answer = chat(proxy.origin, "ev", [user("u1")])
    with open_events(proxy.origin, "ev") as events:
        replayed = events.until(is_usage)
        # the client's message, then the reply the proxy stored, then usage
        assert [f.event for f in replayed] == [MESSAGE_APPENDED, MESSAGE_APPENDED, USAGE]
        for frame in replayed:
            assert_well_formed(frame, "ev")
        appended = replayed[0].data
        assert (appended["from_pos"], appended["count"], appended["superseded"]) == (0, 1, 0)
        stored = replayed[1].data
        assert (stored["from_pos"], stored["count"], stored["source"]) == (1, 1, "upstream")
        usage = replayed[2].data
        assert usage["limit"] == 128_000 and usage["model"] == MODEL
        assert usage["prompt_tokens"] == usage["occupancy"] == 42

        # live: a second turn on the open stream
        chat(proxy.origin, "ev", [user("u1"), answer, user("u2")])
        live = events.until(is_usage)
    assert [f.event for f in live] == [MESSAGE_APPENDED, MESSAGE_APPENDED, USAGE]
    for frame in live:
        assert_well_formed(frame, "ev")
    # the resent reply matched the stored one: only the new user message is appended
    assert (live[0].data["from_pos"], live[0].data["count"], live[0].data["superseded"]) == (
        2,
        1,
        0,
    )
    assert (live[1].data["from_pos"], live[1].data["count"], live[1].data["source"]) == (
        3,
        1,
        "upstream",
    )
    ids = [int(f.id) for f in [*replayed, *live] if f.id]
    assert ids == sorted(ids) and len(set(ids)) == 6


def test_streamed_request_publishes_usage(proxy: ProxyServer, fake_upstream: FakeUpstream) -> None:
    fake_upstream.script(reply("streamed", usage=(321, 2)))
    chat(proxy.origin, "st", [user("u1")], stream=True)
    with open_events(proxy.origin, "st") as events:
        usage = events.until(is_usage)[-1]
    assert usage.data["prompt_tokens"] == 321


def test_last_event_id_replays_only_later_events(proxy: ProxyServer) -> None:
    answer = chat(proxy.origin, "replay", [user("u1")])
    chat(proxy.origin, "replay", [user("u1"), answer, user("u2")])
    with open_events(proxy.origin, "replay") as events:
        first_usage = events.until(is_usage)
        everything = [*first_usage, *events.until(is_usage)]
    assert len(everything) == 6
    cut = everything[2].id  # the first request's usage: the second request's events follow
    assert cut is not None
    with open_events(proxy.origin, "replay", last_event_id=cut) as events:
        again = events.take(3)
    assert [(f.event, f.id) for f in again] == [(f.event, f.id) for f in everything[3:]]
    assert [f.data for f in again] == [f.data for f in everything[3:]]


def test_events_fan_out_across_replicas(
    proxy: ProxyServer, settings: Settings, fake_upstream: FakeUpstream
) -> None:
    other = ProxyServer(settings.model_copy(update={"watch_config": False})).start()
    try:
        answer = chat(proxy.origin, "shared", [user("u1")])
        with open_events(other.origin, "shared") as events:
            replayed = events.until(is_usage)  # also proves the subscription is in place
            # produced by replica A, delivered live by replica B (via LISTEN/NOTIFY)
            chat(proxy.origin, "shared", [user("u1"), answer, user("u2")])
            live = events.until(is_usage)
            # and the other way round on the same stream
            t0 = time.monotonic()
            chat(other.origin, "shared", [user("u1"), answer, user("u2"), answer, user("u3")])
            back = events.until(is_usage)
            assert time.monotonic() - t0 < READ_TIMEOUT
    finally:
        other.stop()
    assert [f.event for f in live] == [MESSAGE_APPENDED, MESSAGE_APPENDED, USAGE]
    assert min(int(f.id or 0) for f in live) > max(int(f.id or 0) for f in replayed)
    assert [f.event for f in back] == [MESSAGE_APPENDED, MESSAGE_APPENDED, USAGE]
    assert all(f.data["session_id"] == "shared" for f in [*live, *back])


def test_a_stream_sees_only_its_own_session(proxy: ProxyServer) -> None:
    chat(proxy.origin, "mine", [user("u1")])
    chat(proxy.origin, "theirs", [user("x")])
    with open_events(proxy.origin, "mine") as events:
        events.until(is_usage)
        chat(proxy.origin, "theirs", [user("x"), {"role": "assistant", "content": "ok"}, user("y")])
        chat(proxy.origin, "mine", [user("u1"), {"role": "assistant", "content": "ok"}, user("u2")])
        live = events.until(is_usage)
    assert [(f.event, f.data["session_id"]) for f in live] == [
        (MESSAGE_APPENDED, "mine"),
        (MESSAGE_APPENDED, "mine"),
        (USAGE, "mine"),
    ]


def test_an_event_nobody_announced_still_reaches_an_open_stream(
    proxy: ProxyServer, settings: Settings
) -> None:
    """Events are NOTIFYed only for watched sessions; a stream whose registration is missing
    (the race with a request in flight, or an emptied unlogged table) catches up from the
    table, once per event."""

    async def forget_watchers() -> None:
        conn = await asyncpg.connect(settings.database_url)
        try:
            await conn.execute("DELETE FROM event_watchers")
        finally:
            await conn.close()

    answer = chat(proxy.origin, "unannounced", [user("u1")])
    with open_events(proxy.origin, "unannounced") as events:
        replayed = events.until(is_usage)
        run_sync(forget_watchers())
        chat(proxy.origin, "unannounced", [user("u1"), answer, user("u2")])
        late = events.until(is_usage)  # within READ_TIMEOUT, via the periodic catch-up
        chat(proxy.origin, "unannounced", [user("u1"), answer, user("u2"), answer, user("u3")])
        later = events.until(is_usage)
    assert [f.event for f in late] == [MESSAGE_APPENDED, MESSAGE_APPENDED, USAGE]
    assert [f.event for f in later] == [MESSAGE_APPENDED, MESSAGE_APPENDED, USAGE]
    ids = [int(f.id or 0) for f in [*replayed, *late, *later]]
    assert ids == sorted(set(ids))  # in order, none twice


def test_an_event_that_commits_after_a_later_one_is_still_sent(
    proxy: ProxyServer, settings: Settings, monkeypatch: Any
) -> None:
    """Ids come from a sequence and writers commit them out of order (a request and a
    background compaction, or two replicas): a catch-up that saw id n+1 first must not move
    the stream past id n."""
    monkeypatch.setattr("proxy.api.events.CATCH_UP_SECONDS", 0.2)
    dsn = settings.database_url
    assert dsn is not None
    chat(proxy.origin, "reordered", [user("u1")])
    insert = (
        "INSERT INTO events (tenant, session_id, name, data) SELECT tenant, id, $2, "
        "jsonb_build_object('session_id', id) FROM sessions WHERE id = $1 RETURNING id"
    )
    inserted, release, early_id = threading.Event(), threading.Event(), []

    def slow_writer() -> None:  # id n, committed only when told
        async def run() -> None:
            conn = await asyncpg.connect(dsn)
            try:
                async with conn.transaction():
                    early_id.append(await conn.fetchval(insert, "reordered", "test.early"))
                    inserted.set()
                    await asyncio.to_thread(release.wait, 10)
            finally:
                await conn.close()

        asyncio.run(run())

    async def write_late() -> int:  # id n+1, committed at once
        conn = await asyncpg.connect(dsn)
        try:
            return int(await conn.fetchval(insert, "reordered", "test.late"))
        finally:
            await conn.close()

    writer = threading.Thread(target=slow_writer)
    with open_events(proxy.origin, "reordered") as events:
        events.until(is_usage)
        writer.start()
        try:
            assert inserted.wait(5)
            late_id = run_sync(write_late())
            (late,) = events.until(lambda f: f.event == "test.late")[-1:]
            time.sleep(0.6)  # catch-ups run, and see id n+1 but not n
        finally:
            release.set()
            writer.join(10)
        early = events.until(lambda f: f.event == "test.early")[-1]
    assert int(late.id or 0) == late_id > early_id[0] == int(early.id or 0)
