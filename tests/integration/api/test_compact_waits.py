"""``POST /v1/sessions/{id}/compact`` waits for the request in flight on its session, and
holds nothing of the session while the summariser answers (README, "Timing of writes").

A client that calls ``/compact`` the instant a reply arrives, or while its turn is still
under way, gets a fold made after that turn's reply was stored: the compaction takes its
turn on the session as reset, delete and branch do. It gives the turn back before the fast
model is called, so the agent's next request is served while the summary is written; one
over the hard threshold waits for the compaction's claim, then measures again on its summary
and compacts only if still over.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer, RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_prompts import summary_of
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Agent,
    Model,
    Stack,
    compact_now_called,
    compaction_events,
    stack,
    wait_until,
    words,
)
from tests.integration.api.conftest import wait_for

SUMMARIZE = {"keepRecent": 2}
TENANT = tenant_from_bearer(f"Bearer {CLIENT_KEY}")
LAST = "one more question"


def _history(agent: Agent) -> None:
    """Three turns, below ``softFraction``: any summary is the forced one."""
    for i in range(3):
        agent.say(words(200, f"t{i}"))


def _compact(s: Stack, sid: str, out: list[httpx.Response]) -> threading.Thread:
    """``POST /compact`` on a thread; its answer lands in ``out``."""

    def run() -> None:
        with httpx.Client(
            base_url=s.proxy.origin, headers={"authorization": f"Bearer {CLIENT_KEY}"}
        ) as http:
            out.append(http.post(f"/v1/sessions/{sid}/compact", timeout=20))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _a_hard_chat_waits_it_out(
    s: Stack,
    agent: Agent,
    held: Pacer,
    compacting: tuple[threading.Thread, list[httpx.Response]],
    under: int,
    over: int,
) -> list[str]:
    """With ``/compact``'s summary ``held`` (``compacting``: its thread and answer), a turn
    of ``under`` tokens, then a chat of ``over`` tokens on a thread, which waits for the
    claim (``compact_now_called``); then the summary comes, ``/compact`` is answered 200
    and the chat too: what the chat said."""
    compact, out = compacting
    waiting = compact_now_called(s)
    agent.say(words(under, "m"))
    said: list[str] = []
    chat = threading.Thread(target=lambda: said.append(agent.say(words(over, "big"))))
    chat.start()
    try:
        assert waiting.wait(20), "the request over the hard threshold did not wait"
    finally:
        held.allow(20)
    compact.join(30)
    chat.join(30)
    assert out and out[0].status_code == 200, out[0].text if out else "no answer"
    return said


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_compact_sent_during_a_turn_folds_that_turns_reply(
    stream: bool, tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    held = Pacer(first=True)  # the last turn's answer, until the test lets it come

    def main(req: RecordedRequest) -> Reply:
        last = req.json["messages"][-1].get("content")
        return reply("the held answer", pacer=held) if last == LAST else reply("ok")

    sid = "during" + ("-stream" if stream else "")
    with stack(tmp_path, db_dsn, fake_upstream, Model(main=main), summarize=SUMMARIZE) as s:
        agent = Agent(s.client(sid))
        _history(agent)
        s.replied(sid)
        turn = threading.Thread(target=agent.say_stream if stream else agent.say, args=(LAST,))
        turn.start()
        wait_until(lambda: len(s.main_bodies()) == 4, what="the last turn at the provider")
        out: list[httpx.Response] = []
        compact = _compact(s, sid, out)
        try:  # the compaction waits behind the turn, in the session's queue on this replica
            assert wait_for(lambda: out or s.proxy.queued(TENANT, sid) == 2)
            assert not out, out[0].text
        finally:
            held.allow(20)
        turn.join(30)
        compact.join(30)
        assert not held.expired and agent.messages[-1]["content"] == "the held answer"
        assert out and out[0].status_code == 200, out[0].text if out else "no answer"
        body = out[0].json()
        (row,) = s.summaries(sid)
        # the fold was made from the history with the turn's reply: 9 messages, 2 kept
        assert body["compacted"] and body["version"] == row["version"] == 1
        assert body["boundary"] == row["boundary"] == len(agent.messages) - 2 == 7


def test_a_chat_during_a_compactions_summariser_call_is_served(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    # the summariser's answer, until the test lets it come: a chat that waited for it
    # would wait the patience out (60 s), 6x the 10 s the test gives it
    held = Pacer(60, first=True)
    model = Model(fast_pacer=held)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=SUMMARIZE) as s:
        agent = Agent(s.client("flowing"))
        _history(agent)
        s.replied("flowing")
        out: list[httpx.Response] = []
        compact = _compact(s, "flowing", out)
        wait_until(lambda: len(model.fast_times) == 1, what="the summariser's call")
        said: list[str] = []
        chat = threading.Thread(target=lambda: said.append(agent.say("meanwhile")))
        chat.start()
        try:  # served while the briefing is held: the compaction holds no turn on the session
            assert wait_for(lambda: said, timeout=10), "the chat waited for the compaction"
            assert said == ["ok"] and not out
        finally:
            held.allow(20)
        compact.join(30)
        chat.join(30)
        assert not held.expired
        assert out and out[0].status_code == 200, out[0].text if out else "no answer"
        assert out[0].json()["compacted"]
        agent.say("after")  # the session goes on from the summary and the turn made meanwhile


def test_a_hard_request_that_waited_out_a_compact_measures_again_on_its_summary(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """On one replica, a request over the hard threshold made while ``/compact``'s summariser
    answers waits for that compaction's claim (it is no background task of the replica to
    wait for); once its summary is stored the request rebuilds its window on it and
    measures again: under the threshold now, it sends that window, no second fast call.
    Its superseded compaction, which folded nothing, is one DEBUG line naming the session."""
    caplog.set_level(logging.DEBUG, logger="cascade.compaction")
    held = Pacer(first=True)  # the summariser's answer, until the test lets it come
    model = Model(fast_pacer=held)
    summarize = {**SUMMARIZE, "hardFraction": 0.5}
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=summarize) as s:
        agent = Agent(s.client("hardwait"))
        for i in range(3):  # under 0.5 of 4000; /compact folds the first two turns
            agent.say(words(550, f"t{i}"))
        s.replied("hardwait")
        out: list[httpx.Response] = []
        compact = _compact(s, "hardwait", out)
        wait_until(lambda: len(model.fast_times) == 1, what="the summariser's call")
        # under the threshold (more for another compaction to fold), then over it
        said = _a_hard_chat_waits_it_out(s, agent, held, (compact, out), 50, 600)
        assert said == ["ok"]
        rows = s.summaries("hardwait")
        last = s.main_bodies()[-1]
        triggers = [e["trigger"] for e in compaction_events(s, "hardwait")]
    assert len(model.fast_times) == 1, "the waiting request compacted again"
    assert [summary_of(last)] == [r["content"] for r in rows]
    assert triggers == ["api", "api"]
    superseded = [r for r in caplog.records if "folds nothing: another" in r.getMessage()]
    assert [(r.levelno, r.name) for r in superseded] == [(logging.DEBUG, "cascade.compaction")]
    assert "hard compaction of session hardwait" in superseded[0].getMessage()


def test_a_hard_request_still_over_after_a_compacts_summary_compacts_on_it(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The request that waited out ``/compact``'s claim measures again on its summary and,
    still over the hard threshold, compacts on it: a second summary, folded after the
    first, whose window it sends."""
    held = Pacer(first=True)  # the summariser's first answer, until the test lets it come
    model = Model(fast_pacer=held)
    summarize = {**SUMMARIZE, "softFraction": 0.6, "hardFraction": 0.6}
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=summarize) as s:
        agent = Agent(s.client("stillover"))
        for i, size in enumerate((300, 300, 800)):  # /compact folds the first two turns
            agent.say(words(size, f"t{i}"))
        s.replied("stillover")
        out: list[httpx.Response] = []
        compact = _compact(s, "stillover", out)
        wait_until(lambda: len(model.fast_times) == 1, what="the summariser's call")
        # under the threshold, then over 0.6 of 4000 before /compact's summary and after it
        said = _a_hard_chat_waits_it_out(s, agent, held, (compact, out), 200, 1500)
        assert said == ["ok"]
        rows = s.summaries("stillover")
        last = s.main_bodies()[-1]
        triggers = [e["trigger"] for e in compaction_events(s, "stillover")]
    assert [r["version"] for r in rows] == [1, 2] and rows[1]["boundary"] > rows[0]["boundary"]
    assert summary_of(last) == rows[1]["content"]
    assert triggers == ["api", "api", "hard", "hard"]


def test_a_compact_whose_client_leaves_while_another_compaction_runs_compacts_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """A forced compaction that found the session's compaction taken waits for it (its
    claim), then folds what is left. A client that leaves meanwhile (its timeout) ends it
    there, as one that leaves while it waits for the session: run after the first, it would
    call the fast model, billed, for nobody."""
    held = Pacer(first=True)  # the first compaction's briefing, until the test lets it come
    model = Model(fast_pacer=held)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=SUMMARIZE) as s:
        agent = Agent(s.client("claimed"))
        _history(agent)
        s.replied("claimed")
        out: list[httpx.Response] = []
        first = _compact(s, "claimed", out)
        wait_until(lambda: len(model.fast_times) == 1, what="the first compaction's call")
        agent.say("meanwhile")  # more to fold once the first compaction is done
        s.replied("claimed")
        with (
            httpx.Client(
                base_url=s.proxy.origin, headers={"authorization": f"Bearer {CLIENT_KEY}"}
            ) as http,
            pytest.raises(httpx.ReadTimeout),  # it waits for the first's claim, then leaves
        ):
            http.post("/v1/sessions/claimed/compact", timeout=0.5)
        held.allow(20)
        first.join(30)
        assert out and out[0].status_code == 200, out[0].text if out else "no answer"
        time.sleep(0.8)  # a poll of the claim lands at most 0.5 s after it is freed
        assert len(model.fast_times) == 1, "the compaction ran for a client that had left"
        assert [r["version"] for r in s.summaries("claimed")] == [1]


def test_a_compact_whose_client_leaves_during_the_summariser_call_completes(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """Once the fast model is called the work is paid for: a client that leaves then (its
    connection closed) does not throw it away. The compaction completes and is stored, so
    the session's next request is folded by it, as if the client had stayed (README,
    Decisions, "Timing of writes")."""
    held = Pacer(first=True)  # the briefing, until the test lets it come
    model = Model(fast_pacer=held)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=SUMMARIZE) as s:
        agent = Agent(s.client("left"))
        _history(agent)
        s.replied("left")
        origin = urlsplit(s.proxy.origin)
        assert origin.hostname is not None and origin.port is not None
        with socket.create_connection((origin.hostname, origin.port), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/sessions/left/compact HTTP/1.1\r\n"
                + f"Host: {origin.netloc}\r\nAuthorization: Bearer {CLIENT_KEY}\r\n".encode()
                + b"Content-Length: 0\r\n\r\n"
            )
            wait_until(lambda: len(model.fast_times) == 1, what="the summariser's call")
        time.sleep(0.3)  # the server has read the hang-up before the briefing comes
        held.allow(20)
        wait_until(lambda: s.summaries("left"), what="the summary of the abandoned compact")
        assert not held.expired
        (row,) = s.summaries("left")
        assert row["version"] == 1 and row["invalidated_at"] is None
        ended = s.events("left", "context.compaction.completed", "context.compaction.failed")
        assert [e["name"] for e in ended] == ["context.compaction.completed"], ended
        assert ended[0]["trigger"] == "api"
        agent.say("after")  # folded by the summary the abandoned compact stored
        assert "<conversation_summary>" in str(s.main_bodies()[-1]["messages"])
