"""A session's lease across two replicas (issue 24): a stream longer than the lease's time
to live keeps its session (the replica renews the lease while it streams), and the other
replica's request on the session is served once the stream's reply is stored."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from proxy.settings import Settings
from tests.fakes.replies import RecordedRequest, Reply, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config

AUTH = {"authorization": "Bearer sk-test-client", "x-session-id": "long"}


def test_a_stream_longer_than_the_ttl_keeps_its_session(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    ttl = 0.6
    arrivals: list[tuple[float, str]] = []

    def answer(req: RecordedRequest) -> Reply:
        last = req.json["messages"][-1]["content"]
        arrivals.append((time.monotonic(), last))
        if last == "first":  # 2.4 s of chunks: four times the lease's time to live
            return reply("long answer", chunks=12, chunk_delay=0.2)
        return reply("second answer")

    fake_upstream.default = answer
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    settings = Settings(
        database_url=db_dsn, config=config, watch_config=False, lease_ttl_seconds=ttl
    )
    replicas = [ProxyServer(settings).start() for _ in range(2)]
    try:
        ended: list[float] = []

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

        worker = threading.Thread(target=stream)
        worker.start()
        fake_upstream.wait_for_requests(1)
        time.sleep(3 * ttl)  # the lease would have expired twice over without renewal
        history = [user("first"), {"role": "assistant", "content": "long answer"}]
        second = httpx.post(
            f"{replicas[1].origin}/v1/chat/completions",
            headers=AUTH,
            timeout=20,
            json={"model": "gpt-4o", "messages": [*history, user("second")]},
        )
        worker.join(10)
    finally:
        for r in replicas:
            r.stop()
    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["message"]["content"] == "second answer"
    (first_at, _), (second_at, last) = arrivals
    assert last == "second"
    # the second replica reached the provider only after the stream's end
    assert ended and second_at >= ended[0] - 0.05, (second_at - first_at, ended[0] - first_at)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
