"""A session's lease across two replicas (issue 24): a stream longer than the lease's time
to live keeps its session (the replica renews the lease while it streams), and the other
replica's request on the session is served once the stream's reply is stored."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from proxy.settings import Settings
from tests.fakes.replies import Pacer, RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, wait_for, write_config
from tests.integration.conftest import column

AUTH = {"authorization": "Bearer sk-test-client", "x-session-id": "long"}


def test_a_stream_longer_than_the_ttl_keeps_its_session(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    # Renewed every ttl / 3: renewals a loaded machine delays by a few hundred ms still keep
    # the lease (at 0.6 s one such delay let it lapse, and the test failed on that).
    ttl = 1.2
    arrivals: list[tuple[float, str]] = []
    pacer = Pacer()  # the stream's answer stays unfinished until the test lets it end

    def answer(req: RecordedRequest) -> Reply:
        last = req.json["messages"][-1]["content"]
        arrivals.append((time.monotonic(), last))
        if last == "first":
            return reply("long answer", chunks=12, pacer=pacer)
        return reply("second answer")

    def queued() -> bool:
        """Whether a waiter from the other replica found the lease held (migration 0022)."""
        return any(column(db_dsn, "SELECT lease_queue FROM sessions WHERE id = 'long'"))

    fake_upstream.default = answer
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    settings = Settings(
        database_url=db_dsn, config=config, watch_config=False, lease_ttl_seconds=ttl
    )
    replicas = [ProxyServer(settings).start() for _ in range(2)]
    try:
        ended: list[float] = []
        second: list[httpx.Response] = []

        def stream() -> None:
            body = {"model": "gpt-4o", "stream": True, "messages": [user("first")]}
            with (
                httpx.Client(base_url=replicas[0].origin, headers=AUTH, timeout=20) as c,
                c.stream("POST", "/v1/chat/completions", json=body) as r,
            ):
                assert r.status_code == 200
                text = "".join(r.iter_lines())
            assert "[DONE]" in text
            ended.append(time.monotonic())

        def ask_the_other_replica() -> None:
            history = [user("first"), {"role": "assistant", "content": "long answer"}]
            second.append(
                httpx.post(
                    f"{replicas[1].origin}/v1/chat/completions",
                    headers=AUTH,
                    timeout=20,
                    json={"model": "gpt-4o", "messages": [*history, user("second")]},
                )
            )

        workers = [threading.Thread(target=stream), threading.Thread(target=ask_the_other_replica)]
        workers[0].start()
        fake_upstream.wait_for_requests(1)
        time.sleep(2 * ttl)  # the lease would have expired without renewal
        workers[1].start()
        # The other replica's request finds the lease still held: it waits in the session's
        # queue, and has not reached the provider while the stream is unfinished.
        assert wait_for(queued, timeout=10), "the other replica's request never waited"
        assert [last for _, last in arrivals] == ["first"]
        released = time.monotonic()
        pacer.allow(20)
        for w in workers:
            w.join(20)
    finally:
        for r in replicas:
            r.stop()
    assert not pacer.expired
    assert second and second[0].status_code == 200, second and second[0].text
    assert second[0].json()["choices"][0]["message"]["content"] == "second answer"
    (_, _), (second_at, last) = arrivals
    assert last == "second"
    # the second replica reached the provider only after the stream was let end
    assert ended and second_at > released


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
