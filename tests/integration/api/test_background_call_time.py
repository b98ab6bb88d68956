"""A provider call the request does not wait for (a background compaction's fast-model call,
running while the request's own call does) is none of the request's time on providers: the
access line's ``upstream_ms`` and the overhead (``X-Cascade-Overhead-Ms``,
``cascade_overhead_seconds``) measure the request's own calls. Counted in, the two calls'
times were summed over the one stretch they shared, so ``upstream_ms`` passed the request's
``duration_ms`` and the overhead read 0."""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.fakes.replies import RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, Stack, wait_until, words
from tests.integration.api.conftest import Records

SLOW_FROM = 5  # the fifth turn crosses softFraction: its compaction runs beside its call


def test_a_background_compactions_call_is_not_the_requests_upstream_time(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, records: Records
) -> None:
    calls = itertools.count(1)

    def main(req: RecordedRequest) -> Reply:
        return reply("ok", first_byte_delay=0.6 if next(calls) >= SLOW_FROM else 0.0)

    fake_upstream.default = Model(fast_delay=0.2, main=main)
    with Stack(tmp_path, db_dsn, fake_upstream) as s:
        agent = Agent(s.client("background-time"))
        for i in range(SLOW_FROM - 1):
            agent.say(words(450, f"t{i}"))
        agent.messages.append({"role": "user", "content": words(450, "last")})
        raw = agent.client.chat.completions.with_raw_response.create(
            model=agent.model, messages=agent.messages
        )
        wait_until(s.fast_bodies, what="a compaction")
        lines = [f for f in records.access(SLOW_FROM) if f["path"].endswith("/completions")]
    compacting = lines[SLOW_FROM - 1]
    assert compacting["upstream_ms"] <= compacting["duration_ms"], compacting
    assert compacting["upstream_ms"] >= 550, compacting  # its own call, 0.6 s
    overhead = float(raw.headers["x-cascade-overhead-ms"])
    assert 0 < overhead < compacting["duration_ms"] - 550, overhead
