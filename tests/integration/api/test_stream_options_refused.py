"""A provider that refuses the ``stream_options`` the proxy adds to every stream (strict
OpenAI-compatible servers: older vLLM, Fireworks, Databricks' gateway answer 400 or 422
"Extra inputs are not permitted") still streams through the proxy: the call is sent again
without it, and later streams to that provider go without it from the start. A client that
sent ``stream_options`` itself gets the provider's refusal, as it would direct."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import RecordedRequest, Responder, error, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

_EXTRA = {
    "object": "error",
    "message": "[{'type': 'extra_forbidden', 'loc': ('body', 'stream_options'), "
    "'msg': 'Extra inputs are not permitted', 'input': {'include_usage': True}}]",
    "type": "BadRequestError",
    "code": 400,
}


def _strict(status: int) -> Any:
    def answer(req: RecordedRequest) -> Responder:
        return error(status, _EXTRA) if "stream_options" in req.json else reply("streamed")

    return answer


def _chat(sid: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"hello {sid}"}]
    return {"model": "m", "messages": messages, "stream": True, **extra}


@pytest.mark.parametrize("status", [400, 422])
def test_a_stream_refused_for_the_added_stream_options_goes_again_without_them(
    status: int, start_proxy: StartProxy, tmp_path: Path
) -> None:
    with FakeUpstream() as fake:
        fake.default = _strict(status)
        proxy = start_proxy(write_config(tmp_path / "a.json", fake.url))
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0)
        for sid in ("s1", "s2"):
            stream = client.chat.completions.create(
                **_chat(sid), extra_headers={"x-session-id": sid}
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == (
                "streamed"
            )
        sent = [("stream_options" in r.json) for r in fake.requests]
        assert sent == [True, False, False]  # the second stream went without them at once


def test_a_null_stream_options_is_none_of_the_clients(
    start_proxy: StartProxy, tmp_path: Path
) -> None:
    with FakeUpstream() as fake:
        fake.default = _strict(400)
        proxy = start_proxy(write_config(tmp_path / "a.json", fake.url))
        body = _chat("s5", stream_options=None)  # JSON's "none": the proxy's field is refused
        resp = httpx.post(f"{proxy.url}/chat/completions", json=body, timeout=10)
        assert resp.status_code == 200
        assert resp.text.endswith("data: [DONE]\n\n")
        assert [("stream_options" in r.json) for r in fake.requests] == [True, False]


def test_a_clients_own_stream_options_refused_is_relayed(
    start_proxy: StartProxy, tmp_path: Path
) -> None:
    with FakeUpstream() as fake:
        fake.default = _strict(400)
        proxy = start_proxy(write_config(tmp_path / "a.json", fake.url))
        body = _chat("s3", stream_options={"include_usage": True})
        resp = httpx.post(f"{proxy.url}/chat/completions", json=body, timeout=10)
        assert resp.status_code == 400
        assert "stream_options" in resp.text
        assert len(fake.requests) == 1


def test_another_refusal_is_relayed_once(start_proxy: StartProxy, tmp_path: Path) -> None:
    with FakeUpstream() as fake:
        fake.default = error(400, {"error": {"message": "bad model", "code": "model_not_found"}})
        proxy = start_proxy(write_config(tmp_path / "a.json", fake.url))
        resp = httpx.post(f"{proxy.url}/chat/completions", json=_chat("s4"), timeout=10)
        assert resp.status_code == 400
        assert "model_not_found" in resp.text
        assert len(fake.requests) == 1


def test_a_refusal_that_only_quotes_the_body_leaves_later_streams_their_usage(
    start_proxy: StartProxy, tmp_path: Path
) -> None:
    """A client's own error whose text quotes the request (pydantic's ``input_value``) names
    ``stream_options`` without being about it: refused without it too, the client gets that
    refusal, and the provider's next stream still asks for usage."""

    def quoting(req: RecordedRequest) -> Responder:
        if req.json.get("tool_choice"):
            return error(400, {"object": "error", "message": f"needs tools [input={req.json}]"})
        return reply("streamed")

    with FakeUpstream() as fake:
        fake.default = quoting
        proxy = start_proxy(write_config(tmp_path / "a.json", fake.url))
        bad = _chat("s6", tool_choice="required")
        resp = httpx.post(f"{proxy.url}/chat/completions", json=bad, timeout=10)
        assert resp.status_code == 400
        assert "needs tools" in resp.text
        resp = httpx.post(f"{proxy.url}/chat/completions", json=_chat("s7"), timeout=10)
        assert resp.status_code == 200
        assert [("stream_options" in r.json) for r in fake.requests] == [True, False, True]
