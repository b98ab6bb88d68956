"""``read_tool_output`` rounds against a provider that refuses what OpenAI refuses
(``tests/fakes/strict_openai.py``): whatever the rounds end in, the reply the client gets is
one it can send back, so its next request passes the provider's checks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.replies import reply
from tests.fakes.strict_openai import violations
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import chat, history, read_call
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import blob


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_a_silent_model_cut_off_reading_gets_the_client_a_reply_it_can_resend(
    proxy: ProxyServer, fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.validator = violations
    rounds = proxy.settings.max_internal_rounds + 1
    fake_upstream.script(
        *(reply(None, tool_calls=[read_call(f"int_{n}", id="call_big")]) for n in range(rounds))
    )
    messages = history("call_big", blob(9000, "big"))
    if stream:
        chunks = list(chat(proxy, "s1", messages, stream=True))
        pieces = [c.choices[0].delta.content for c in chunks if c.choices]
        content = "".join(p or "" for p in pieces) if any(p is not None for p in pieces) else None
        answer: dict[str, Any] = {"role": "assistant", "content": content}
    else:
        answer = chat(proxy, "s1", messages).choices[0].message.model_dump(exclude_none=True)
    assert "tool_calls" not in answer
    chat(proxy, "s1", [*messages, answer, {"role": "user", "content": "and now?"}])
    assert fake_upstream.violations == []
    assert len(fake_upstream.bodies()) == rounds + 1
