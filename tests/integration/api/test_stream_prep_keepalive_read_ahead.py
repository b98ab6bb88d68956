"""A stream offered ``read_tool_output`` reads its body's first piece before it answers (a
later round's refusal is then still its status): that read, too, ends when the keep-alive
interval begun at the request's acceptance does, with a comment, so a provider whose
headers came late in the interval and whose first token is slow does not leave the client
without a byte for two intervals."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config
from tests.integration.api.held_session import HEADERS
from tests.integration.api.read_tool_output_helpers import CLIENT_TOOLS, context, history
from tests.integration.api.test_stream_prep_keepalive import KEEPALIVE, _content
from tests.integration.transcripts import blob


def test_the_read_ahead_answers_within_the_interval(
    start_proxy: StartProxy, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url, context=context())
    proxy = start_proxy(config, keepalive_seconds=1.0)
    # headers 0.75 s in, the first token 1.2 s after them: the interval ends at 1.0 s, one
    # begun at the headers at 1.75 s; the bound between leaves each side 0.35 s of load
    # (a clock's property: no order of events tells the two apart)
    fake_upstream.script(reply("late", first_byte_delay=0.75, first_token_delay=1.2))
    body = {
        "model": "gpt-fake",
        "messages": history("call_big", blob(9000, "big")),
        "tools": CLIENT_TOOLS,
        "stream": True,
    }
    with httpx.Client(base_url=proxy.origin, headers=HEADERS, timeout=10) as c:
        began = time.monotonic()
        with c.stream("POST", "/v1/chat/completions", json=body) as resp:
            waited = time.monotonic() - began
            data = resp.read()
    assert resp.status_code == 200
    assert waited < 1.35, waited  # the interval (1 s), not the headers' 0.75 s and one more
    assert data.startswith(KEEPALIVE) and _content(data) == "late"
