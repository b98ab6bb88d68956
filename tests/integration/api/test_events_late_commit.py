"""An event that commits after a later one (two writers: its id came first, its commit
second) still reaches a client that reconnected with the later one's id before it
committed: its stream ended any way at all (the client's drop, the server's bound), and
the reconnect's replay could not have found it."""

from __future__ import annotations

import asyncio
import threading
import time

import asyncpg
import httpx
import pytest

from proxy.api import event_cursor, events as events_api
from proxy.settings import Settings
from tests.integration.api import test_events
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_events import EventStream, chat, is_usage, open_events, user
from tests.integration.conftest import run_sync

INSERT = (
    "INSERT INTO events (tenant, session_id, name, data) SELECT tenant, id, $2, "
    "jsonb_build_object('session_id', id) FROM sessions WHERE id = $1 RETURNING id"
)


def _until_live(events: EventStream) -> list[str]:
    """The replay's lines, up to the comment that ends it."""
    lines = []
    for line in events._lines:
        if line == ": live":
            return lines
        lines.append(line)
    raise AssertionError("event stream ended")


async def _write_late(
    dsn: str, sid: str, ids: list[int], commit: threading.Event, early: int | None
) -> None:
    """``test.late``, written in a transaction left open, then ``test.early`` committed (one,
    or ``early`` at once); their ids to ``ids``. ``test.late`` commits once ``commit`` is
    set."""
    late = await asyncpg.connect(dsn)
    try:
        async with late.transaction():
            ids.append(int(await late.fetchval(INSERT, sid, "test.late")))
            other = await asyncpg.connect(dsn)
            try:
                if early is None:
                    ids.append(int(await other.fetchval(INSERT, sid, "test.early")))
                else:
                    rows = await other.fetch(
                        "INSERT INTO events (tenant, session_id, name, data) SELECT tenant, "
                        "id, 'test.early', jsonb_build_object('session_id', id) FROM "
                        "sessions, generate_series(1, $2) WHERE id = $1 RETURNING id",
                        sid,
                        early,
                    )
                    ids.extend(sorted(int(r["id"]) for r in rows))
            finally:
                await other.close()
            await asyncio.to_thread(commit.wait, 10)
    finally:
        await late.close()


class _LateWriter:
    """``_write_late`` on a thread of its own: ``ids`` as they are written, ``commit`` to set
    for ``test.late`` to commit."""

    def __init__(self, settings: Settings, sid: str, early: int | None = None) -> None:
        assert settings.database_url is not None
        self.ids: list[int] = []
        self.commit = threading.Event()
        self.thread = threading.Thread(
            target=run_sync,
            args=(_write_late(settings.database_url, sid, self.ids, self.commit, early),),
        )

    def start(self, written: int) -> list[int]:
        """Starts the writer and waits until it has written ``written`` ids."""
        self.thread.start()
        while len(self.ids) < written and self.thread.is_alive():
            time.sleep(0.01)
        return self.ids

    def end(self) -> None:
        self.commit.set()
        if self.thread.is_alive():
            self.thread.join()


def test_an_id_below_last_event_id_committed_after_the_reconnect_comes(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_api, "CATCH_UP_SECONDS", 0.3)
    chat(proxy.origin, "late", [user("u1")])  # a turn's events, written just now
    writer = _LateWriter(settings, "late")
    try:
        late, early = writer.start(2)
        assert late < early
        # the client received ``early`` (its stream sent it, then ended) and comes back
        with open_events(proxy.origin, "late", last_event_id=str(early)) as events:
            replay = _until_live(events)
            writer.commit.set()
            got = events.next()
    finally:
        writer.end()
    assert not [line for line in replay if line.startswith("id:")]  # nothing the client has
    assert (got.event, got.id) == ("test.late", str(late))


def test_an_id_below_the_last_frames_committed_after_it_comes_on_the_reconnect(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client received ``early`` live while ``late``, its id below, was not committed;
    the stream ended there, ``late`` committed, and the reconnect's replay finds it: the
    client's Last-Event-ID (a resume token) says it does not have it."""
    monkeypatch.setattr(test_events, "READ_TIMEOUT", 1.0)
    chat(proxy.origin, "late-after", [user("u1")])
    writer = _LateWriter(settings, "late-after")
    try:
        with open_events(proxy.origin, "late-after") as events:
            events.until(is_usage)
            late, early = writer.start(2)
            events.until(lambda f: f.event == "test.early")
            with pytest.raises(httpx.ReadTimeout):  # the client's last frame was the one after
                events.next()
            last_id = events.last_id
        writer.end()
        assert last_id is not None
        with open_events(proxy.origin, "late-after", last_event_id=last_id) as events:
            replay = _until_live(events)
    finally:
        writer.end()
    assert [line for line in replay if line.startswith("id:")][:1] == [f"id: {late}"]
    assert "event: test.early" not in replay  # the client has it
    assert replay[-2:] == [f"id: {early}", ""]  # and resumes past it: it has both


def test_a_late_commit_below_more_ids_than_a_token_lists_comes_on_the_reconnect(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy session: the stream sent more ids above its mark than a resume token lists
    (``event_cursor.TOKEN_IDS``) while ``late``, below them, was not committed. Its last
    frame lists the lowest ones, not the last event's id alone: the reconnect's replay sends
    ``late`` and those it left out again (a second time at most), and nothing is lost."""
    monkeypatch.setattr(test_events, "READ_TIMEOUT", 1.0)
    sid, early = "late-busy", event_cursor.TOKEN_IDS + 6
    chat(proxy.origin, sid, [user("u1")])
    writer = _LateWriter(settings, sid, early)
    try:
        with open_events(proxy.origin, sid) as events:
            had = {f.id for f in events.until(is_usage)}
            late, *written = writer.start(early + 1)
            had |= {f.id for f in events.until(lambda f: f.id == str(written[-1]), max_frames=99)}
            with pytest.raises(httpx.ReadTimeout):  # the client's last frame was the one after
                events.next()
            last_id = events.last_id
        writer.end()
        assert last_id is not None
        with open_events(proxy.origin, sid, last_event_id=last_id) as events:
            replay = _until_live(events)
    finally:
        writer.end()
    again = [line.removeprefix("id: ") for line in replay if line.startswith("id: ")]
    assert str(late) in again and str(late) not in had
    assert {str(i) for i in written} <= had  # each early event came, and may come again
    assert len(again) < early  # the token's ids did not
