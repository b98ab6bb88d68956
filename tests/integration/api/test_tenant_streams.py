"""The same session id in two tenants, with an event stream open on each: the streams share no
read, no held event and no end. Each gets only its own tenant's events, live, by a catch-up
the session's streams share, or by a replay from a Last-Event-ID the other tenant's stream
gave; the other tenant deleting its session ends only that tenant's stream."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.api import events
from proxy.cascade.types import USAGE
from proxy.store import events as store
from proxy.store.db import GuardedConnection
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import (
    ProxyServer,
    StartProxy,
    replied,
    wait_for,
    write_config,
)
from tests.integration.api.tenant_keys import tenant_auth
from tests.integration.api.test_events import EventStream, Frame, open_events
from tests.integration.api.test_events_listener_lost import (
    _end_listener,
    _listener_pid,
    _until_end,
)

KEY_A = "cascade-key-tenant-a-c3f9a1"
KEY_B = "cascade-key-tenant-b-77e0b4"
SID = "shared-run"
CATCH_UP = 0.3
"""Seconds between a stream's catch-up reads here (``events.CATCH_UP_SECONDS``)."""


@pytest.fixture
def proxy(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> ProxyServer:
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", CATCH_UP)
    auth = tenant_auth(monkeypatch, (KEY_A, "acme"), (KEY_B, "globex"))
    path = write_config(tmp_path / "agents.json", fake_upstream.url, auth=auth)
    return start_proxy(path)


@pytest.fixture
def origin(proxy: ProxyServer) -> str:
    return proxy.origin


def _chat(origin: str, key: str, text: str) -> None:
    with httpx.Client(base_url=origin, timeout=10) as http:
        http.headers["authorization"] = f"Bearer {key}"
        r = http.post(
            "/v1/chat/completions",
            headers={"x-session-id": SID},
            json={"model": "m", "messages": [{"role": "user", "content": text}]},
        )
        assert r.status_code == 200, r.text
        replied(http, SID)


def _turn(stream: EventStream) -> list[Frame]:
    return stream.until(lambda f: f.event == USAGE)


def _ids(frames: list[Frame]) -> set[int]:
    return {int(f.id) for f in frames if f.id is not None}


def test_streams_on_one_session_id_of_two_tenants_get_only_their_own_events(
    origin: str,
) -> None:
    _chat(origin, KEY_A, "acme opens")
    _chat(origin, KEY_B, "globex opens")
    with (
        open_events(origin, SID, token=KEY_A) as a,
        open_events(origin, SID, token=KEY_B) as b,
    ):
        acme = _turn(a)
        globex = _turn(b)
        assert not _ids(acme) & _ids(globex)
        _chat(origin, KEY_A, "acme secret turn")
        acme_live = _turn(a)
        time.sleep(3 * CATCH_UP)  # a shared catch-up of each stream's session comes and goes
        _chat(origin, KEY_B, "globex second turn")
        globex_live = _turn(b)
        assert not _ids(acme + acme_live) & _ids(globex_live)
        assert "acme secret" not in "".join(f.raw for f in globex_live)
        assert min(_ids(globex_live)) > max(_ids(globex))


def test_a_last_event_id_of_another_tenant_replays_only_the_callers_events(
    origin: str,
) -> None:
    _chat(origin, KEY_B, "globex first")
    _chat(origin, KEY_A, "acme first")
    _chat(origin, KEY_A, "acme second")
    with open_events(origin, SID, token=KEY_A) as a:
        acme = _ids(_turn(a) + _turn(a))
    with open_events(origin, SID, token=KEY_B) as b:
        globex = _ids(_turn(b))
    assert max(acme) > max(globex)
    for last in (max(acme), min(acme), 0):  # past, between and before globex's events
        with open_events(origin, SID, token=KEY_B, last_event_id=str(last)) as b:
            _chat(origin, KEY_B, f"globex after {last}")
            got = _turn(b)
        assert not _ids(got) & acme, last
        assert "acme" not in "".join(f.raw for f in got)


def test_another_tenant_deleting_the_session_id_leaves_the_callers_stream_open(
    origin: str,
) -> None:
    _chat(origin, KEY_A, "acme opens")
    _chat(origin, KEY_B, "globex opens")
    with (
        open_events(origin, SID, token=KEY_A) as a,
        open_events(origin, SID, token=KEY_B) as b,
    ):
        _turn(a)
        _turn(b)
        with httpx.Client(base_url=origin, timeout=10) as http:
            http.headers["authorization"] = f"Bearer {KEY_A}"
            assert http.delete(f"/v1/sessions/{SID}").status_code == 200
        with pytest.raises(AssertionError, match="event stream ended"):
            a.next()
        time.sleep(3 * CATCH_UP)  # a catch-up of globex's stream reads the session after the delete
        _chat(origin, KEY_B, "globex carries on")
        assert _turn(b)[-1].event == USAGE


def test_streams_ended_for_a_new_listener_end_with_only_their_tenants_events(
    proxy: ProxyServer, origin: str, db_dsn: str
) -> None:
    """Both tenants' streams end once the bus listens again; what each sends before its last
    frame, and its reconnect's replay from the last id it received, are its tenant's own."""
    _chat(origin, KEY_A, "acme opens")
    _chat(origin, KEY_B, "globex opens")
    with (
        open_events(origin, SID, token=KEY_A) as a,
        open_events(origin, SID, token=KEY_B) as b,
    ):
        acme, globex = _ids(_turn(a)), _ids(_turn(b))
        lost = _end_listener(proxy, db_dsn)
        _chat(origin, KEY_A, "acme in the gap")
        assert wait_for(lambda: _listener_pid(proxy) not in (None, lost))
        acme |= _ids(_until_end(a))
        ended = _until_end(b)
    assert ended and not _ids(ended) & acme
    assert "acme" not in "".join(f.raw for f in ended)
    resume = max(_ids(ended) | globex)
    with open_events(origin, SID, token=KEY_B, last_event_id=str(resume)) as b:
        _chat(origin, KEY_B, "globex back")
        back = _turn(b)
    assert not _ids(back) & acme and min(_ids(back)) > resume


def test_another_tenants_failing_catch_up_leaves_the_callers_stream_open(
    origin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every catch-up of acme's session errs in PostgreSQL (a statement error, no outage):
    its stream ends; globex's stream on the same id reads on its own and stays open."""
    _chat(origin, KEY_A, "acme opens")
    _chat(origin, KEY_B, "globex opens")
    failing = False
    fetch = GuardedConnection.fetch

    async def erring(self: GuardedConnection, query: str, *args: object, **kw: Any) -> Any:
        if failing and query == store.FETCH_SESSION_EVENTS_AFTER and args[0] == "acme":
            query, args = "SELECT 1 / 0", ()
        return await fetch(self, query, *args, **kw)

    monkeypatch.setattr(GuardedConnection, "fetch", erring)
    with (
        open_events(origin, SID, token=KEY_A) as a,
        open_events(origin, SID, token=KEY_B) as b,
    ):
        _turn(a)
        globex = _ids(_turn(b))
        failing = True
        with pytest.raises((AssertionError, httpx.RemoteProtocolError)):
            while True:  # ended by its next catch-up
                a.next()
        _chat(origin, KEY_B, "globex carries on")
        back = _turn(b)
    assert min(_ids(back)) > max(globex)
