"""Tenant isolation, attacked (docs/security.md): a caller holding tenant A's key, who knows
(or guesses) every id tenant B's session holds — the session id, its tool call's id and
handle, its fact's id, its suggestion's id, its events' ids — gets from every route the
answer it gets for ids that were never made, reaches none of B's text, and changes nothing
of B's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cascade.types import MESSAGE_DELTA_APPENDED, USAGE
from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, replied, write_config
from tests.integration.api.memory_suggestions import suggest
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS, history, read_call
from tests.integration.api.tenant_keys import tenant_auth
from tests.integration.api.test_events import open_events
from tests.integration.transcripts import blob

KEY_A = "cascade-key-attacker-7f3a91"
KEY_B = "cascade-key-victim-2c64e0"
VICTIM = "victim-session"
NEVER = "never-made-session"
SECRET = "victim-only-text-"
"""Every text of B's carries it: a response of A's that holds it read B's data."""
AGENTS = {"default": {"provider": "openai"}, "coder": {"provider": "openai"}}
ATTACKER_MODEL = "coder"
"""The attacker's requests run agent ``coder`` (the victim's ``default``): a key limited to
it is refused another agent's session of its own tenant with a 403."""


@pytest.fixture(params=["proxy-keys", "limited-key", "pass-through"])
def clients(
    request: pytest.FixtureRequest,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """The attacker's client and the victim's: with proxy keys, tenants ``attacker`` and
    ``victim`` (the attacker's key limited to its agent, ``limited-key``: a 403 is not a
    404); in pass-through mode, two bearer tokens (each token's hash its tenant)."""
    keys: dict[str, Any] = {"agents": AGENTS}
    if request.param != "pass-through":
        limited = (["coder"],) if request.param == "limited-key" else ()
        keys["auth"] = tenant_auth(monkeypatch, (KEY_A, "attacker", *limited), (KEY_B, "victim"))
    context = {
        "toolOutput": {"maxChars": 2000, "persistRaw": True},
        "eviction": {"enabled": False},
        "summarize": {"softFraction": 0.98, "hardFraction": 0.99, "keepRecent": 2},
    }
    path = write_config(tmp_path / "agents.json", fake_upstream.url, context=context, **keys)
    origin = start_proxy(path).origin
    made = [
        httpx.Client(base_url=origin, timeout=10, headers={"authorization": f"Bearer {key}"})
        for key in (KEY_A, KEY_B)
    ]
    with made[0], made[1]:
        yield made[0], made[1]


def _chat(
    http: httpx.Client, sid: str, messages: list[Any], model: str = "gpt-4o", **body: Any
) -> httpx.Response:
    r = http.post(
        "/v1/chat/completions",
        headers={"x-session-id": sid},
        json={"model": model, "messages": messages, **body},
    )
    assert r.status_code == 200, r.text
    replied(http, sid)
    return r


def _victim_session(b: httpx.Client, fake: FakeUpstream) -> dict[str, Any]:
    """B's session: a cut tool output (spilled raw, a handle), a summary, a fact: what B
    can read."""
    messages = history("call_v", blob(9000, SECRET), tag=SECRET)
    answer = _chat(b, VICTIM, messages, tools=CLIENT_TOOLS).json()["choices"][0]["message"]
    messages += [answer, {"role": "user", "content": f"{SECRET}next"}]
    _chat(b, VICTIM, messages, tools=CLIENT_TOOLS)
    fake.script(reply(f"## Objective\n{SECRET}summary"))
    compacted = b.post(f"/v1/sessions/{VICTIM}/compact")
    assert compacted.status_code == 200, compacted.text
    assert SECRET in b.get(f"/v1/sessions/{VICTIM}").text
    fact = b.post("/v1/memory", json={"scope": "global", "text": f"{SECRET}fact"})
    assert fact.status_code == 201, fact.text
    own = b.get(f"/v1/sessions/{VICTIM}/tool-outputs/call_v")
    assert own.status_code == 200 and SECRET in own.text, own.text
    return {"fact": fact.json()["id"], "view": b.get(f"/v1/sessions/{VICTIM}").json()}


def _as_never(resp: httpx.Response) -> tuple[int, str]:
    """The answer with B's id written as the never-made one: equal answers tell nothing."""
    return resp.status_code, resp.text.replace(VICTIM, NEVER)


ROUTES = [
    ("GET", "/v1/sessions/{sid}", None),
    ("GET", "/v1/sessions/{sid}/messages", None),
    ("GET", "/v1/sessions/{sid}/messages?include_superseded=true", None),
    ("GET", "/v1/sessions/{sid}/tool-outputs/call_v", None),
    ("GET", "/v1/sessions/{sid}/tool-outputs/call_v@2", None),
    ("GET", "/v1/sessions/{sid}/tool-outputs/call_v?grep=victim", None),
    ("GET", "/v1/sessions/{sid}/events", None),
    ("POST", "/v1/sessions/{sid}/compact", None),
    ("POST", "/v1/sessions/{sid}/branch", {"id": "stolen-copy"}),
    ("POST", "/v1/sessions/{sid}/reset", None),
    ("DELETE", "/v1/sessions/{sid}", None),
    ("GET", "/v1/memory/suggestions?session_id={sid}", None),
]


def test_every_session_route_answers_another_tenants_id_as_one_never_made(
    clients: tuple[httpx.Client, httpx.Client], fake_upstream: FakeUpstream, records: Records
) -> None:
    a, b = clients
    victim = _victim_session(b, fake_upstream)
    for method, template, body in ROUTES:
        theirs = a.request(method, template.format(sid=VICTIM), json=body)
        never = a.request(method, template.format(sid=NEVER), json=body)
        assert _as_never(theirs) == (never.status_code, never.text), (method, template)
        assert SECRET not in theirs.text
        assert theirs.status_code in (200, 404), (template, theirs.text)
    # nothing A did moved B's session: the same view, its output still there
    assert b.get(f"/v1/sessions/{VICTIM}").json() == victim["view"]
    assert SECRET in b.get(f"/v1/sessions/{VICTIM}/tool-outputs/call_v").text
    assert b.get("/v1/sessions/stolen-copy").status_code == 404
    assert a.get("/v1/sessions/stolen-copy").status_code == 404
    # nor does the log: neither key nor any of B's text
    logged = "\n".join(f"{r.getMessage()} {vars(r)}" for r in records.records)
    assert "/v1/sessions" in logged
    for word in (KEY_A, KEY_B, SECRET):
        assert word not in logged


def test_another_tenants_fact_and_suggestion_ids_are_unknown_ids(
    clients: tuple[httpx.Client, httpx.Client],
    fake_upstream: FakeUpstream,
    request: pytest.FixtureRequest,
    db_dsn: str,
) -> None:
    a, b = clients
    fact = _victim_session(b, fake_upstream)["fact"]
    mode = request.node.callspec.params["clients"]
    tenant = tenant_from_bearer(f"Bearer {KEY_B}") if mode == "pass-through" else "victim"
    suggest(db_dsn, VICTIM, "victim-suggestion", [f"{SECRET}suggested"], tenant=tenant)
    never = fact + 1000
    theirs, made_up = a.delete(f"/v1/memory/{fact}"), a.delete(f"/v1/memory/{never}")
    assert theirs.status_code == made_up.status_code == 404
    assert theirs.text.replace(str(fact), str(never)) == made_up.text
    for verb in ("accept", "reject"):
        theirs = a.post(f"/v1/memory/suggestions/victim-suggestion/{verb}")
        made_up = a.post(f"/v1/memory/suggestions/never-suggested/{verb}")
        assert theirs.status_code == made_up.status_code == 404
        assert theirs.text.replace("victim-suggestion", "never-suggested") == made_up.text
    for path in ("/v1/memory", "/v1/memory/suggestions", "/v1/memory?scope=global"):
        got = a.get(path)
        assert got.status_code == 200 and SECRET not in got.text, path
    # B's are as they were: its fact, and its suggestion still pending
    assert SECRET in b.get("/v1/memory", params={"scope": "global"}).text
    assert "victim-suggestion" in b.get("/v1/memory/suggestions").text


def test_a_chat_under_another_tenants_session_id_sees_none_of_its_history(
    clients: tuple[httpx.Client, httpx.Client], fake_upstream: FakeUpstream
) -> None:
    """A's chat under B's session id is A's own session: its prompt carries none of B's
    messages, and a ``read_tool_output`` of B's handle (the model asking for it in A's
    session, whatever put the id there) reads A's store, which has no such output."""
    a, b = clients
    victim = _victim_session(b, fake_upstream)
    fake_upstream.script(
        reply("looking", tool_calls=[read_call(id="call_v")]),
        reply("looking again", tool_calls=[read_call("int_2", id="call_v@2")]),
        reply("done"),
    )
    mine = history("call_a", blob(9000, "attacker-own-"), tag="mine")
    out = _chat(a, VICTIM, mine, ATTACKER_MODEL, tools=CLIENT_TOOLS)
    assert SECRET not in out.text
    sent = fake_upstream.bodies()[-3:]
    for body in sent:
        assert SECRET not in str(body["messages"])
    pages = [
        m["content"] for m in sent[-1]["messages"] if m.get("tool_call_id") in ("int_1", "int_2")
    ]
    assert pages == [
        f"read_tool_output: no stored output with id {cid!r} in this session"
        for cid in ("call_v", "call_v@2")
    ]
    assert SECRET in b.get(f"/v1/sessions/{VICTIM}/tool-outputs/call_v").text
    assert b.get(f"/v1/sessions/{VICTIM}").json() == victim["view"]


def test_one_session_id_held_by_both_tenants_shows_and_changes_only_the_callers(
    clients: tuple[httpx.Client, httpx.Client], fake_upstream: FakeUpstream
) -> None:
    """Both tenants hold the id: every read of A's shows A's session alone, and A's
    reset, branch and delete of it leave B's as it was."""
    a, b = clients
    victim = _victim_session(b, fake_upstream)
    mine = history("call_v", blob(9000, "attacker-own-"), tag="mine")
    _chat(a, VICTIM, mine, ATTACKER_MODEL, tools=CLIENT_TOOLS)
    for method, template, _ in ROUTES:
        if method != "GET" or template.endswith("/events"):
            continue
        got = a.request(method, template.format(sid=VICTIM))
        assert SECRET not in got.text, template
    listed = a.get("/v1/sessions")
    assert [s["id"] for s in listed.json()["data"]] == [VICTIM] and SECRET not in listed.text
    for method, template, body in ROUTES:
        if method == "GET":
            continue
        r = a.request(method, template.format(sid=VICTIM), json=body)
        assert r.status_code in (200, 404, 409), (template, r.text)
        assert SECRET not in r.text
    assert a.get(f"/v1/sessions/{VICTIM}").status_code == 404  # A's own, deleted
    assert SECRET not in a.get("/v1/sessions/stolen-copy/messages").text
    assert b.get(f"/v1/sessions/{VICTIM}").json() == victim["view"]
    assert SECRET in b.get(f"/v1/sessions/{VICTIM}/tool-outputs/call_v").text


def test_metrics_name_no_tenant_session_or_text(
    clients: tuple[httpx.Client, httpx.Client], fake_upstream: FakeUpstream
) -> None:
    """``/metrics`` (any key opens it without ``metricsKeyEnv``) counts every tenant's
    requests, but names no tenant, session id or text of theirs."""
    a, b = clients
    _victim_session(b, fake_upstream)
    got = a.get("/metrics")
    assert got.status_code == 200
    for word in (VICTIM, SECRET, "victim", KEY_B):
        assert word not in got.text


def test_pass_through_clients_whose_key_rides_in_the_query_are_separate_tenants(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path, records: Records
) -> None:
    """Regression: in pass-through mode a client that sends its provider key in the query
    (``?key=``, as some providers take it) and no bearer token was tenant ``anonymous``,
    every such client the same one, so each read the others' sessions, outputs and facts.
    Its key is its tenant as a bearer token is (the same key either way the same tenant)."""
    path = write_config(tmp_path / "agents.json", fake_upstream.url, context={})
    origin = start_proxy(path).origin
    with (
        httpx.Client(base_url=origin, timeout=10, params={"key": KEY_A}) as a,
        httpx.Client(base_url=origin, timeout=10, params={"api-key": KEY_B}) as b,
        httpx.Client(base_url=origin, timeout=10) as anonymous,
        httpx.Client(
            base_url=origin, timeout=10, headers={"authorization": f"Bearer {KEY_B}"}
        ) as bearer,
    ):
        _chat(b, VICTIM, [{"role": "user", "content": f"{SECRET}question"}])
        fact = b.post("/v1/memory", json={"scope": "global", "text": f"{SECRET}fact"})
        assert fact.status_code == 201, fact.text
        assert f"api-key={KEY_B}" in fake_upstream.requests[-1].query  # the key pays
        for other in (a, anonymous):
            assert other.get(f"/v1/sessions/{VICTIM}").status_code == 404
            assert SECRET not in other.get("/v1/sessions").text
            assert SECRET not in other.get("/v1/memory").text
        assert SECRET in bearer.get(f"/v1/sessions/{VICTIM}/messages").text
        assert SECRET in b.get("/v1/memory").text
    logged = "\n".join(f"{r.getMessage()} {vars(r)}" for r in records.records)
    assert "/v1/sessions" in logged and KEY_A not in logged and KEY_B not in logged


def test_query_key_clients_sharing_a_placeholder_bearer_are_separate_tenants(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Regression: an SDK needs an ``api_key``, so a client paying with a key in the query
    sends a placeholder bearer beside it (``EMPTY``); that bearer alone was its tenant, the
    one every such client shared, and one sending the placeholder alone, paying nothing,
    read them all. Its tenant is both together: the same key sent both ways that key's."""
    path = write_config(tmp_path / "agents.json", fake_upstream.url, context={})
    origin = start_proxy(path).origin
    placeholder = {"authorization": "Bearer EMPTY"}
    with (
        httpx.Client(base_url=origin, timeout=10, headers=placeholder, params={"key": KEY_A}) as a,
        httpx.Client(base_url=origin, timeout=10, headers=placeholder, params={"key": KEY_B}) as b,
        httpx.Client(base_url=origin, timeout=10, headers=placeholder) as bare,
        httpx.Client(
            base_url=origin,
            timeout=10,
            headers={"authorization": f"Bearer {KEY_B}"},
            params={"key": KEY_B},
        ) as both_ways,
    ):
        _chat(b, VICTIM, [{"role": "user", "content": f"{SECRET}question"}])
        assert f"key={KEY_B}" in fake_upstream.requests[-1].query  # the query key pays
        _chat(both_ways, "own", [{"role": "user", "content": "mine"}])
        for other in (a, bare, both_ways):
            assert other.get(f"/v1/sessions/{VICTIM}").status_code == 404
            assert SECRET not in other.get("/v1/sessions").text
        assert SECRET in b.get(f"/v1/sessions/{VICTIM}/messages").text
        events = f"/v1/sessions/{VICTIM}/events"
        with b.stream("GET", events, headers={"accept": "text/event-stream"}) as stream:
            assert stream.status_code == 200  # the stream derives the chat's tenant too
        assert a.get(events, headers={"accept": "text/event-stream"}).status_code == 404
        only_key = {"authorization": f"Bearer {KEY_B}"}
        assert httpx.get(f"{origin}/v1/sessions/own", headers=only_key).status_code == 200


@pytest.mark.parametrize("clients", ["proxy-keys"], indirect=True)
def test_a_request_under_another_tenants_busy_session_id_waits_for_nothing(
    clients: tuple[httpx.Client, httpx.Client], fake_upstream: FakeUpstream
) -> None:
    """B's request holds its session (the provider has not answered yet); A's under the same
    id is answered meanwhile, with nothing saying a request of B's was in flight there."""
    a, b = clients
    held = Pacer(patience=15, first=True)
    fake_upstream.script(reply(f"{SECRET}answer", pacer=held))
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"{SECRET}q"}]}
    hold = threading.Thread(
        target=b.post,
        args=("/v1/chat/completions",),
        kwargs={"json": body, "headers": {"x-session-id": VICTIM}},
    )
    hold.start()
    try:
        fake_upstream.wait_for_requests(1)
        mine = a.post(
            "/v1/chat/completions",
            headers={"x-session-id": VICTIM},
            json={"model": ATTACKER_MODEL, "messages": [{"role": "user", "content": "hi"}]},
            timeout=5,
        )
        assert mine.status_code == 200, mine.text
        assert not held.expired and hold.is_alive()  # B's was held all along
        assert SECRET not in mine.text and SECRET not in str(dict(mine.headers))
    finally:
        held.allow(20)
        hold.join(10)


@pytest.mark.parametrize("clients", ["proxy-keys"], indirect=True)
def test_a_stream_under_another_tenants_session_id_gets_none_of_its_live_deltas(
    clients: tuple[httpx.Client, httpx.Client], fake_upstream: FakeUpstream
) -> None:
    """A's event stream on A's session under B's id: B's streamed reply (its transient
    ``session.message.delta.appended`` frames, which B's own stream gets) and B's persisted
    events never reach it."""
    a, b = clients
    _chat(a, VICTIM, [{"role": "user", "content": "attacker first"}], ATTACKER_MODEL)
    _chat(b, VICTIM, [{"role": "user", "content": "victim first"}])
    origin = str(a.base_url).rstrip("/")
    with (
        open_events(origin, VICTIM, token=KEY_A) as mine,
        open_events(origin, VICTIM, token=KEY_B) as theirs,
    ):
        mine.until(lambda f: f.event == USAGE)  # the replays of each one's first turn
        theirs.until(lambda f: f.event == USAGE)
        fake_upstream.script(reply(f"{SECRET}streamed answer", chunks=1))
        messages = [{"role": "user", "content": "victim first"}]
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "q"}]
        body = {"model": "gpt-4o", "stream": True, "messages": messages}
        with b.stream(
            "POST", "/v1/chat/completions", json=body, headers={"x-session-id": VICTIM}
        ) as streamed:
            assert SECRET in streamed.read().decode()
        victims = theirs.until(lambda f: f.event == USAGE)
        assert any(f.event == MESSAGE_DELTA_APPENDED and SECRET in f.raw for f in victims)
        _chat(a, VICTIM, [{"role": "user", "content": "attacker second"}], ATTACKER_MODEL)
        live = mine.until(lambda f: f.event == USAGE)
    assert live and not any(SECRET in f.raw or "streamed answer" in f.raw for f in live)
    assert not {f.id for f in live if f.id} & {f.id for f in victims if f.id}
