"""A streamed request that waits on a compaction (one it runs itself, here with ``background``
off; one over ``hardFraction`` waits alike) hears keep-alive comments meanwhile, one every
keep-alive interval from its acceptance (``prep_wait.py``): a summariser may take up to
``summarize.timeoutSeconds`` (180 s), past the idle timeout of many proxies and clients in
between (nginx's 60 s), which would cut a silent stream."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import CLIENT_KEY, MAIN, Agent, Model, stack, words

SUMMARY_SECONDS = 1.5  # the fast model's delay; the stack's keep-alive interval is 0.3 s


def test_a_streamed_request_waiting_on_a_compaction_gets_keep_alives(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=SUMMARY_SECONDS)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("silent"))
        for i in range(4):
            agent.say(words(450, f"t{i}"))
        calls = len(model.fast_times)
        agent.messages.append({"role": "user", "content": words(450, "crossing")})
        start = time.monotonic()
        with httpx.stream(
            "POST",
            f"{s.proxy.url}/chat/completions",
            json={"model": MAIN, "messages": agent.messages, "stream": True},
            headers={"authorization": f"Bearer {CLIENT_KEY}", "X-Session-Id": "silent"},
            timeout=20,
        ) as resp:
            chunks = resp.iter_raw()
            first = next(chunks)
            waited = time.monotonic() - start
            rest = b"".join(chunks)
        assert len(model.fast_times) == calls + 1, "the request compacted"
        assert b"[DONE]" in first + rest
        assert waited < SUMMARY_SECONDS * 2 / 3, f"first byte after {waited:.2f} s"
