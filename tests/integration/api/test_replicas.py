"""Two replicas on one database behave as one (issue 25, deliverable 7).

Two ``create_app`` apps, each under its own uvicorn server on loopback, share the test
database and the fake upstream: a session's requests are serialised whichever replica takes
them, a compaction runs once, events reach a subscriber on the other replica, and each
replica's ``/metrics`` reports what it served.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import openai

from proxy.session_id import tenant_from_bearer
from tests.fakes.replies import Pacer, RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_prompts import summary_of
from tests.integration.api.compaction_stack import (
    CLIENT_KEY,
    Agent,
    Model,
    compact_now_called,
    compaction_events,
    stack,
    wait_until,
    words,
)
from tests.integration.api.test_events import chat, is_usage, open_events, user
from tests.integration.api.test_metrics import scrape

CHAT_ROUTE = "/v1/chat/completions"


def test_a_sessions_requests_are_serialised_across_replicas(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    arrivals: list[float] = []

    def slow(req: RecordedRequest) -> Reply:
        arrivals.append(time.monotonic())
        return reply("done", first_byte_delay=0.6)

    with stack(tmp_path, db_dsn, fake_upstream, Model(main=slow), replicas=2) as s:
        errors: list[BaseException] = []

        def ask(replica: int, text: str) -> None:
            try:
                Agent(s.client("serial", replica)).say(text)
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        threads = [threading.Thread(target=ask, args=(i, f"from replica {i}")) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        s.settle("serial", 2)
        per_replica = [scrape(server.origin) for server in s.servers]
    first, second = sorted(arrivals)
    assert second - first >= 0.55, (
        "the second replica called the provider while the first still held the session"
    )
    # each replica's /metrics counts the one request it served, not the other's
    for m in per_replica:
        assert m.value("cascade_requests_total", route=CHAT_ROUTE, status="200") == 1
        assert m.value("cascade_upstream_duration_seconds_count", provider="openai") == 1


def test_a_compaction_runs_once_for_both_replicas_and_is_counted_once(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    held = Pacer(first=True)  # the briefing, until the other replica served two requests
    model = Model(fast_pacer=held)
    with stack(
        tmp_path, db_dsn, fake_upstream, model, replicas=2, summarize={"hardFraction": 0.95}
    ) as s:
        agent = Agent(s.client("dedup", 0))
        agent.fill()
        wait_until(lambda: model.fast_times, 20, "the first replica's compaction")
        agent.client = s.client("dedup", 1)  # the same session, through the other replica
        for i in range(2):
            agent.say(words(450, f"r{i}"))
        # none waited for the compaction in flight: it is still held
        assert s.proxy.compacting(tenant_from_bearer(f"Bearer {CLIENT_KEY}"), "dedup")
        held.allow(10)
        wait_until(lambda: s.summaries("dedup"), 20, "the summary")
        assert not held.expired
        s.settle("dedup", 7)
        done = [scrape(server.origin) for server in s.servers]
        names = [e["name"] for e in compaction_events(s, "dedup")]
        summaries = s.summaries("dedup")
    assert len(model.fast_times) == 1, "the second replica started its own compaction"
    assert len(summaries) == 1
    assert names == ["context.compaction.started", "context.compaction.completed"]
    assert [
        m.value("cascade_compactions_total", result="completed")
        if "cascade_compactions_total" in {x.name for x in m.samples}
        else 0
        for m in done
    ] == [1, 0]
    assert done[0].value("cascade_tokens_reclaimed_total", stage="compaction") > 0
    assert [m.value("cascade_requests_total", route=CHAT_ROUTE) for m in done] == [5, 2]


def test_a_background_compaction_claimed_after_another_replicas_summary_folds_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """The second replica's job, started while the first's compaction ran, claims the
    session only once that one stored its summary: the pressure it was started for is
    relieved, and it calls no fast model (under load its claim can come that late)."""
    held = Pacer(first=True)  # the first replica's briefing, until the test lets it come
    model = Model(fast_pacer=held)
    gate = threading.Event()  # the second replica's background compaction, until it is set
    with stack(
        tmp_path, db_dsn, fake_upstream, model, replicas=2, summarize={"hardFraction": 0.95}
    ) as s:
        summarizer = s.servers[1].state("summarizer")
        run_background = summarizer._run_background

        async def late(job: Any) -> Any:
            await asyncio.to_thread(gate.wait, 20)
            return await run_background(job)

        summarizer._run_background = late
        agent = Agent(s.client("late", 0))
        agent.fill()
        wait_until(lambda: model.fast_times, 20, "the first replica's compaction")
        agent.client = s.client("late", 1)
        for i in range(2):
            agent.say(words(450, f"r{i}"))
        tenant = tenant_from_bearer(f"Bearer {CLIENT_KEY}")
        assert s.servers[1].compacting(tenant, "late"), "no compaction started on the second"
        held.allow(10)
        wait_until(lambda: s.summaries("late"), 20, "the first replica's summary")
        wait_until(lambda: not s.proxy.compacting(tenant, "late"), 10, "its claim released")
        gate.set()
        wait_until(lambda: not s.servers[1].compacting(tenant, "late"), 10, "the late one")
        names = [e["name"] for e in compaction_events(s, "late")]
    assert len(model.fast_times) == 1, "the late compaction called the fast model again"
    assert names == ["context.compaction.started", "context.compaction.completed"]


def test_a_hard_request_that_waited_out_another_replicas_compaction_measures_again(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """A request over the hard threshold on the second replica waits for the claim of the
    first's compaction; once that one stored its summary the request rebuilds its window on
    it and measures again: under the threshold now, it sends that window and calls no fast
    model of its own."""
    held = Pacer(first=True)  # the first replica's briefing, until the test lets it come
    model = Model(fast_pacer=held)
    with stack(
        tmp_path, db_dsn, fake_upstream, model, replicas=2, summarize={"hardFraction": 0.8}
    ) as s:
        waiting = compact_now_called(s, 1)
        agent = Agent(s.client("hardwait", 0))
        agent.fill()
        wait_until(lambda: model.fast_times, 20, "the first replica's compaction")
        agent.client = s.client("hardwait", 1)
        agent.say(words(50, "r"))  # the summary's span leaves something for another to fold
        errors: list[BaseException] = []

        def ask() -> None:
            try:
                agent.say(words(1000, "big"))  # over 0.8 of 4000, under limit - reserved
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        thread = threading.Thread(target=ask)
        thread.start()
        assert waiting.wait(20), "the second replica's request did not wait for the claim"
        held.allow(10)
        thread.join(20)
        assert errors == []
        rows = s.summaries("hardwait")
        last = s.main_bodies()[-1]
        names = [e["name"] for e in compaction_events(s, "hardwait")]
    assert len(model.fast_times) == 1, "the waiting request compacted again"
    assert [summary_of(last)] == [r["content"] for r in rows]
    assert names == ["context.compaction.started", "context.compaction.completed"]


def test_an_event_made_on_one_replica_reaches_a_subscriber_on_the_other(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, replicas=2) as s:
        a, b = (server.origin for server in s.servers)
        answer = chat(a, "fan-out", [user("u1")])
        with open_events(b, "fan-out") as events:
            events.until(is_usage)  # the replay: the subscription is in place
            chat(a, "fan-out", [user("u1"), answer, user("u2")])
            live = events.until(is_usage)
        assert [f.event for f in live][-1] == "context.usage"
        assert all(f.data["session_id"] == "fan-out" for f in live)
        # the subscriber's replica counts its stream, once it is closed, as a request served
        events_route = {"route": "/v1/sessions/{session_id}/events", "status": "200"}
        wait_until(
            lambda: "/v1/sessions/{session_id}/events" in scrape(b).text,
            5.0,
            "the closed event stream in replica B's metrics",
        )
        assert scrape(b).value("cascade_requests_total", **events_route) == 1
        assert scrape(a).value("cascade_requests_total", route=CHAT_ROUTE) == 2


def test_both_replicas_answer_metrics_with_an_open_client(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, replicas=2) as s:
        for i, server in enumerate(s.servers):
            client = openai.OpenAI(base_url=server.url, api_key="sk-test-client", max_retries=0)
            for _ in range(i + 1):
                client.chat.completions.create(model="gpt-fake", messages=[user("hi")])
        counts = [
            scrape(server.origin).value("cascade_requests_total", route=CHAT_ROUTE)
            for server in s.servers
        ]
    assert counts == [1, 2]
