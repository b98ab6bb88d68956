"""A provider's 401 met after a stream's 200 went out (keep-alives) is an error frame whose
message is the refusal's own wording, which names the provider and its status once: not
"the provider answered 401: {…answered 401 to …}", a JSON body quoted inside a sentence
that says it twice."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.fakes.replies import error
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

_CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
_REFUSED = {"error": {"message": "Invalid key.", "type": "invalid_request_error"}}


def test_a_401_after_the_200_reads_as_the_refusal_says_it(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(error(401, _REFUSED, {"retry-after": "3"}, first_byte_delay=1.0))
    auth = {"authorization": "Bearer sk-inband-client-0123456"}
    with httpx.Client(base_url=proxy.origin, headers=auth) as http:
        resp = http.post("/v1/chat/completions", json=_CHAT)
    assert resp.status_code == 200 and resp.content.startswith(b": keep-alive")
    events = [e for e in resp.content.split(b"\n\n") if e.startswith(b"data:")]
    assert events[-1] == b"data: [DONE]"
    message = json.loads(events[-2][len(b"data:") :])["error"]["message"]
    assert message.count("answered") == 1 and "{" not in message, message
    assert message.startswith("the provider 'openai' at http://127.0.0.1:"), message
    assert "answered 401 to the key the client sent" in message, message
    assert message.endswith(": Invalid key. (Retry-After: 3)"), message
