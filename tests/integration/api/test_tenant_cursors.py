"""A list's cursor is a place, not a row: one that another tenant's page gave, or one made up
to name another tenant's session or fact, pages the caller's own rows from that place, the
same as a cursor naming nothing there, so it shows none of the other tenant's rows and says
nothing of whether the row it names exists. A key limited to some agents pages only their
sessions whatever place its cursor names, and its event stream, sharing a session's reads
with a full key's, gets no event of an agent it may not use."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.api import events
from proxy.cascade.types import MESSAGE_APPENDED, USAGE
from proxy.listing import FACTS, SUGGESTIONS, row_cursor, session_cursor
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, replied, write_config
from tests.integration.api.memory_suggestions import suggest
from tests.integration.api.tenant_keys import tenant_auth
from tests.integration.api.test_events import Frame, open_events

KEY_A = "cascade-key-tenant-a-51c0e2"
KEY_B = "cascade-key-tenant-b-9a7d13"
KEY_LIMITED = "cascade-key-acme-coder-3e88f0"
CATCH_UP = 0.3
"""Seconds between a stream's catch-up reads here (``events.CATCH_UP_SECONDS``)."""
AGENTS = {"default": {"provider": "openai"}, "coder": {"provider": "openai"}}


@pytest.fixture
def clients(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[httpx.Client, httpx.Client, httpx.Client]]:
    """Tenant acme's full key, tenant globex's key, and acme's key limited to ``coder``."""
    monkeypatch.setattr(events, "CATCH_UP_SECONDS", CATCH_UP)
    auth = tenant_auth(
        monkeypatch, (KEY_A, "acme"), (KEY_B, "globex"), (KEY_LIMITED, "acme", ["coder"])
    )
    path = write_config(tmp_path / "agents.json", fake_upstream.url, auth=auth, agents=AGENTS)
    origin = start_proxy(path).origin
    made = [
        httpx.Client(base_url=origin, timeout=10, headers={"authorization": f"Bearer {key}"})
        for key in (KEY_A, KEY_B, KEY_LIMITED)
    ]
    with made[0], made[1], made[2]:
        yield made[0], made[1], made[2]


def _chat(http: httpx.Client, sid: str, model: str = "default") -> None:
    r = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": sid},
        json={"model": model, "messages": [{"role": "user", "content": f"hi {sid}"}]},
    )
    assert r.status_code == 200, r.text
    replied(http, sid)


def _get(http: httpx.Client, path: str, **params: Any) -> dict[str, Any]:
    r = http.get(path, params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _ids(body: dict[str, Any]) -> list[Any]:
    return [row["id"] for row in body["data"]]


def _place(row: dict[str, Any]) -> str:
    return session_cursor(datetime.fromisoformat(row["updated_at"]), row["id"])


def test_another_tenants_session_cursor_pages_only_the_callers_sessions(
    clients: tuple[httpx.Client, httpx.Client, httpx.Client],
) -> None:
    a, b, _ = clients
    for sid in ("acme-1", "shared-2", "acme-3"):
        _chat(a, sid)
    for sid in ("globex-1", "shared-2", "globex-3"):
        _chat(b, sid)
    _chat(a, "acme-4")  # acme's latest: its cursors are places past all of globex's
    first = _get(a, "/v1/sessions", limit=1)
    minted = first["next_cursor"]
    assert isinstance(minted, str)

    theirs = b.get("/v1/sessions", params={"cursor": minted, "limit": 100})
    assert theirs.status_code == 200, theirs.text
    assert _ids(theirs.json()) == ["globex-3", "shared-2", "globex-1"]
    assert "acme" not in theirs.text  # neither a row nor an id of acme's

    acme = {row["id"]: row for row in _get(a, "/v1/sessions")["data"]}
    globex = _get(b, "/v1/sessions")["data"]
    for row in acme.values():  # a cursor naming acme's row, and the same time naming none
        named = _get(b, "/v1/sessions", cursor=_place(row))
        made_up = _get(b, "/v1/sessions", cursor=_place({**row, "id": row["id"] + "-none"}))
        at = datetime.fromisoformat(row["updated_at"])
        own = [g["id"] for g in globex if datetime.fromisoformat(g["updated_at"]) < at]
        assert _ids(named) == _ids(made_up) == own
        assert named["has_more"] is made_up["has_more"] is False


def test_another_tenants_fact_cursor_pages_only_the_callers_facts(
    clients: tuple[httpx.Client, httpx.Client, httpx.Client],
) -> None:
    a, b, _ = clients
    for n in range(3):
        for http, name in ((a, "Acme"), (b, "Globex")):
            made = http.post("/v1/memory", json={"scope": "global", "text": f"{name} fact {n}"})
            assert made.status_code == 201, made.text
    acme = _get(a, "/v1/memory", limit=1)
    globex = _get(b, "/v1/memory")["data"]
    assert acme["has_more"] and len(globex) == 3

    theirs = b.get("/v1/memory", params={"cursor": acme["next_cursor"]})
    assert theirs.status_code == 200, theirs.text
    assert "Acme" not in theirs.text
    first = acme["data"][0]["id"]
    assert [f["text"] for f in theirs.json()["data"]] == [
        f["text"] for f in globex if f["id"] > first
    ]
    for fact in _get(a, "/v1/memory")["data"]:  # acme's ids against an id no row holds
        named = _get(b, "/v1/memory", cursor=row_cursor(FACTS, fact["id"]), limit=1)
        own = [f["id"] for f in globex if f["id"] > fact["id"]]
        assert _ids(named) == own[:1]
        assert named["has_more"] is (len(own) > 1)
    gone = _get(b, "/v1/memory", cursor=row_cursor(FACTS, 2**62))
    assert gone == {"object": "list", "data": [], "has_more": False, "next_cursor": None}


def test_another_tenants_suggestion_cursor_lists_none_of_its_suggestions(
    clients: tuple[httpx.Client, httpx.Client, httpx.Client], db_dsn: str
) -> None:
    a, b, _ = clients
    for n in range(3):
        suggest(db_dsn, "shared", f"acme-s{n}", [f"Acme secret {n}"], tenant="acme")
    suggest(db_dsn, "shared", "globex-s0", ["Globex note"], tenant="globex")
    acme = _get(a, "/v1/memory/suggestions", limit=1)
    assert acme["has_more"], acme
    for cursor in (acme["next_cursor"], row_cursor(SUGGESTIONS, 0)):
        theirs = b.get("/v1/memory/suggestions", params={"cursor": cursor})
        assert theirs.status_code == 200, theirs.text
        assert "acme" not in theirs.text.lower()
    wrong_kind = b.get("/v1/memory/suggestions", params={"cursor": row_cursor(FACTS, 1)})
    assert wrong_kind.status_code == 400
    assert "acme" not in wrong_kind.text.lower()


def test_a_limited_keys_cursor_pages_only_its_agents_sessions(
    clients: tuple[httpx.Client, httpx.Client, httpx.Client],
) -> None:
    a, _, limited = clients
    for n in range(3):
        _chat(a, f"default-{n}")
        _chat(a, f"coder-{n}", model="coder")
    every = _get(a, "/v1/sessions")["data"]
    coder = [row["id"] for row in every if row["id"].startswith("coder-")]
    assert _ids(_get(limited, "/v1/sessions")) == coder
    minted = _get(a, "/v1/sessions", limit=2)["next_cursor"]  # past default-2's place
    assert every[1]["id"] == "default-2"
    assert _ids(_get(limited, "/v1/sessions", cursor=minted)) == coder[1:]
    for row in every:  # a place at any session of the tenant: only coder's past it
        page = _get(limited, "/v1/sessions", cursor=_place(row), limit=1)
        past = [r["id"] for r in every[every.index(row) + 1 :] if r["id"] in coder]
        assert _ids(page) == past[:1]
        assert page["has_more"] is (len(past) > 1)
        assert "default-" not in str(page)
    paged = _get(limited, "/v1/sessions", limit=1)
    while paged["next_cursor"]:  # its own cursors never name another agent's session
        assert "default-" not in str(paged)
        paged = _get(limited, "/v1/sessions", limit=1, cursor=paged["next_cursor"])
    refused = limited.get("/v1/sessions/default-0/events")
    assert refused.status_code == 403


def test_a_limited_keys_stream_sharing_reads_with_a_full_keys_gets_no_other_agents_event(
    clients: tuple[httpx.Client, httpx.Client, httpx.Client],
) -> None:
    """A limited key's and a full key's streams on one session share its catch-up reads;
    once the full key moves the session to an agent the limited key may not use, the limited
    key's stream ends before any event of that agent's turn, which the full key's gets."""
    a, _, limited = clients
    _chat(a, "watched", model="coder")
    origin = str(a.base_url).rstrip("/")
    with (
        open_events(origin, "watched", token=KEY_A) as full,
        open_events(origin, "watched", token=KEY_LIMITED) as coder,
    ):
        full.until(lambda f: f.event == USAGE)
        coder.until(lambda f: f.event == USAGE)
        time.sleep(3 * CATCH_UP)  # a shared catch-up: the two streams read together since
        _chat(a, "watched", model="default")
        moved = full.until(lambda f: f.event == USAGE)
        seen: list[Frame] = []
        with pytest.raises(AssertionError, match="event stream ended"):
            while True:
                seen.append(coder.next())
    assert MESSAGE_APPENDED in [f.event for f in moved]
    assert not {f.id for f in seen if f.id} & {f.id for f in moved if f.id}, seen
    assert limited.get("/v1/sessions/watched/events").status_code == 403


def test_a_limited_keys_suggestion_cursor_lists_only_its_agents_suggestions(
    clients: tuple[httpx.Client, httpx.Client, httpx.Client], db_dsn: str
) -> None:
    """Suggestions of a ``default`` session between a ``coder`` session's: the limited key's
    pages, from its own cursors, from the full key's (which name the ``default`` ones) and
    from one made up at each place, hold only ``coder``'s; asked for the ``default``
    session's, it lists none, the same as for a session that does not exist."""
    a, _, limited = clients
    for n in range(2):
        suggest(db_dsn, "coder-run", f"coder-s{n}", [f"coder note {n}"], "coder", "acme")
        suggest(db_dsn, "default-run", f"default-s{n}", [f"default secret {n}"], tenant="acme")
    path = "/v1/memory/suggestions"
    every = _get(a, path)["data"]
    assert len(every) == 4
    ids = [s["suggestion_id"] for s in _get(limited, path)["data"]]
    assert ids == ["coder-s0", "coder-s1"]
    got, page = [], _get(limited, path, limit=1)
    while True:
        got += [s["suggestion_id"] for s in page["data"]]
        assert "default" not in str(page)
        if not page["next_cursor"]:
            break
        page = _get(limited, path, limit=1, cursor=page["next_cursor"])
    assert got == ids
    full = _get(a, path, limit=2)  # its cursor: the place after default-s0
    assert full["data"][1]["suggestion_id"] == "default-s0"
    assert [
        s["suggestion_id"] for s in _get(limited, path, cursor=full["next_cursor"])["data"]
    ] == ["coder-s1"]
    for cursor in (full["next_cursor"], row_cursor(SUGGESTIONS, 0), row_cursor(SUGGESTIONS, 2**40)):
        page = _get(limited, path, cursor=cursor)
        assert "default" not in str(page)
    for session in ("default-run", "no-such-run"):
        page = _get(limited, path, session_id=session)
        assert page == {"object": "list", "data": [], "has_more": False, "next_cursor": None}


def test_another_tenants_session_id_is_free_to_branch_into(
    clients: tuple[httpx.Client, httpx.Client, httpx.Client],
) -> None:
    """A branch into an id the other tenant uses is made, as into an id nobody uses: no
    "already exists" says the other tenant has it, and its session is left as it was."""
    a, b, _ = clients
    _chat(a, "acme-only")
    _chat(b, "globex-run")
    before = _get(a, "/v1/sessions/acme-only")
    for target in ("acme-only", "nobody-has-this"):
        made = b.post("/v1/sessions/globex-run/branch", json={"id": target})
        assert made.status_code == 200, made.text
        assert made.json()["id"] == target
    assert _get(a, "/v1/sessions/acme-only") == before
    assert _ids(_get(a, "/v1/sessions")) == ["acme-only"]
