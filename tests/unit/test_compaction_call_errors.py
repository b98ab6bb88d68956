"""A compaction's failed fast-model call is reported by its cause: an answer that is no
usable summary as "unusable summary", an error of the call itself (the transport, or a bug
beside it) by its own name, which ``context.compaction.failed`` carries to the client."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from proxy.config import ModelConfig
from proxy.config_context import SummarizeConfig
from proxy.services.compaction_job import SummaryCallError, _call


class _Reply:
    def __init__(self, body: str, request: httpx.Request | None = None) -> None:
        self.status_code, self.text, self.request = 200, body, request

    def json(self) -> Any:
        return json.loads(self.text)


class _Upstream:
    def __init__(self, body: str | None = None, raises: Exception | None = None) -> None:
        self.body, self.raises = body, raises
        self.sent: httpx.Request | None = None

    async def call(self, *args: Any, **kwargs: Any) -> _Reply:
        if self.raises is not None:
            raise self.raises
        assert self.body is not None
        return _Reply(self.body, self.sent)


_JOB = SimpleNamespace(
    session_id="s-1",
    provider=SimpleNamespace(base_url="http://p", name="p"),
    headers={},
    query=(),
    fast_model="fast",
    fast_limits=ModelConfig(),
    cfg=SummarizeConfig(maxAttempts=1),
)


async def _reason(upstream: _Upstream) -> str:
    with pytest.raises(SummaryCallError) as failed:
        await _call(upstream, _JOB, [{"role": "user", "content": "x"}], len)  # type: ignore[arg-type]
    return str(failed.value)


async def test_an_error_of_the_call_itself_is_named_by_its_cause() -> None:
    reason = await _reason(_Upstream(raises=TypeError("bad header value")))
    assert reason == "TypeError: bad header value"


async def test_a_reply_that_is_no_chat_completion_is_an_unusable_summary() -> None:
    reason = await _reason(_Upstream(json.dumps({"object": "list", "data": []})))
    assert reason.startswith("unusable summary (KeyError")


async def test_a_bare_string_error_in_a_200_answer_is_quoted_as_an_error() -> None:
    reason = await _reason(_Upstream(json.dumps({"error": "nope"})))
    assert reason.startswith("unusable summary (ValueError: an error answered with status 200")
    assert "nope" in reason


async def test_an_error_object_in_a_200_answer_is_quoted() -> None:
    """Some gateways answer a provider's failure with status 200 and an OpenAI error object:
    the failure's event quotes it, not only the missing ``choices``."""
    body = {"error": {"message": "upstream model overloaded", "code": 502}}
    reason = await _reason(_Upstream(json.dumps(body)))
    assert reason.startswith("unusable summary (ValueError: an error answered with status 200")
    assert "upstream model overloaded" in reason
    key = "sk-" + "Qx7" * 12
    quoting = _Upstream(json.dumps({"error": {"message": f"bad key {key}"}}))
    quoting.sent = httpx.Request("POST", "http://p/v1", headers={"authorization": f"Bearer {key}"})
    reason = await _reason(quoting)
    assert key not in reason and "bad key" in reason


async def test_a_key_an_error_in_a_200_quotes_with_a_json_escape_is_not_quoted() -> None:
    """A JSON writer may escape any character (.NET's writes ``-`` as ``\\u002D``): the key
    is as plain to whoever reads the quote as when written bare."""
    key = "sk-" + "Qx7" * 12
    body = '{"error": {"message": "bad key sk\\u002D' + "Qx7" * 12 + '"}}'
    quoting = _Upstream(body)
    quoting.sent = httpx.Request("POST", "http://p/v1", headers={"authorization": f"Bearer {key}"})
    reason = await _reason(quoting)
    assert "Qx7Qx7Qx7" not in reason and "bad key" in reason
