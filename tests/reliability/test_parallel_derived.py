"""Issue 21, item 5: parallel requests without a session id never wait on each other; the
ones that name their session stay serialised (README, Decisions: lanes of a derived
session)."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import column
from tests.reliability.conftest import Figures, ProxyServer

ANSWER = 0.25  # the fake upstream's time to first byte
AUTH = {"authorization": "Bearer sk-test-client"}
BODY = {
    "model": "gpt-4o",
    "stream": True,
    "messages": [
        {"role": "system", "content": "Grade this."},
        {"role": "user", "content": "What is 2 + 2?"},
    ],
}


async def streamed(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[float, float, str, str]:
    """(time to the first data frame, time to the end, X-Session-Id, the text received)."""
    t0 = time.monotonic()
    first = None
    async with client.stream("POST", url, json=body, headers=headers or {}) as r:
        assert r.status_code == 200, await r.aread()
        text = ""
        async for line in r.aiter_lines():
            if line.startswith("data:") and first is None:
                first = time.monotonic() - t0
            text += line + "\n"
    assert "data: [DONE]" in text and first is not None
    return first, time.monotonic() - t0, r.headers.get("x-session-id", ""), text


async def burst(
    url: str, n: int, body: dict[str, Any], headers: list[dict[str, str]] | None = None
) -> list[Any]:
    async with httpx.AsyncClient(timeout=30, headers=AUTH) as client:
        return await asyncio.gather(
            *(streamed(client, url, body, headers[i] if headers else None) for i in range(n))
        )


@pytest.fixture
def slow(fake_upstream: FakeUpstream) -> FakeUpstream:
    fake_upstream.default = reply("4", first_byte_delay=ANSWER)
    return fake_upstream


def test_eight_identical_requests_without_a_session_id_run_side_by_side(
    proxy: ProxyServer, slow: FakeUpstream, db_dsn: str, figures: Figures
) -> None:
    """Parallel requests on one derived session do not queue."""
    url = f"{proxy.url}/chat/completions"
    single = asyncio.run(burst(url, 1, BODY))[0][1]
    passthrough = asyncio.run(burst(f"{slow.url}/chat/completions", 8, BODY))
    # The eight answers are held until all eight calls reached the provider: serialised,
    # only the first would.
    held = Pacer(first=True)
    slow.default = reply("4", pacer=held)
    before = len(slow.requests)
    with ThreadPoolExecutor(1) as pool:
        ran = pool.submit(asyncio.run, burst(url, 8, BODY))
        deadline = time.monotonic() + 15
        while len(slow.requests) < before + 8 and time.monotonic() < deadline:
            time.sleep(0.02)
        side_by_side = len(slow.requests) - before
        held.allow(100)
        results = ran.result(30)
    slow.default = reply("4", first_byte_delay=ANSWER)
    assert side_by_side == 8 and not held.expired, side_by_side
    ttfc = [r[0] for r in results]
    ends = [r[1] for r in results]
    figures.add(
        tried=9,
        single_s=single,
        ttfc_p50_ms=statistics.median(ttfc) * 1000,
        passthrough_ttfc_p50_ms=statistics.median(p[0] for p in passthrough) * 1000,
        slowest_s=max(ends),
    )
    ids = sorted(r[2] for r in results)
    assert len(set(ids)) == 8 and all(i.startswith("auto-") for i in ids)
    base = min(ids, key=len)
    assert set(ids) == {base} | {f"{base}.{n}" for n in range(2, 9)}
    # each lane stored its exchange, once (the first lane the single request's too)
    rows = column(db_dsn, "SELECT session_id FROM messages WHERE role = 'assistant'")
    assert Counter(rows) == {i: 2 if i == base else 1 for i in ids}
    # the conversation's next turn continues the lane it started in: the one it is told
    nxt = {
        **BODY,
        "messages": [
            *BODY["messages"],
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3 + 3?"},
        ],
    }
    again = asyncio.run(burst(url, 1, nxt))[0]
    assert again[2] == base


@pytest.mark.parametrize("how", ["path", "header", "metadata"])
def test_requests_that_name_their_session_stay_serialised(
    proxy: ProxyServer, slow: FakeUpstream, figures: Figures, how: str
) -> None:
    """Parallel requests on one named session queue, first come first served."""
    url, body, headers = f"{proxy.url}/chat/completions", dict(BODY), None
    if how == "path":
        url = f"{proxy.origin}/s/named/v1/chat/completions"
    elif how == "header":
        headers = [{"x-session-id": "named"}] * 3
    else:
        body["metadata"] = {"session_id": "named"}
    t0 = time.monotonic()
    results = asyncio.run(burst(url, 3, body, headers))
    total = time.monotonic() - t0
    figures.add(tried=3, total_s=total)
    assert {r[2] for r in results} == {"named"}
    assert total >= 3 * ANSWER, total  # one upstream call at a time
    ends = sorted(r[1] for r in results)
    assert ends[1] - ends[0] >= ANSWER * 0.8 and ends[2] - ends[1] >= ANSWER * 0.8
