"""A failed memory extraction's log line says why the fast model's answer was refused, and
never quotes the answer or a fact (logs hold no content)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import ModelConfig
from proxy.services.promotion import promote

SECRET = "the deploy key lives in vault path ops/zeta"


class _Reply:
    def __init__(self, body: str) -> None:
        self.status_code, self.text = 200, body

    def json(self) -> Any:
        return json.loads(self.text)


class _Upstream:
    def __init__(self, body: str) -> None:
        self.body = body

    async def call(self, *args: Any, **kwargs: Any) -> _Reply:
        return _Reply(self.body)


class _Lent:
    async def give_back(self) -> None:
        pass

    async def take(self) -> Any:
        raise AssertionError("a refused answer writes nothing")


def _count(messages: Any) -> int:
    return sum(len(str(m.get("content") or "")) // 4 for m in messages)


def _completion(content: str) -> str:
    return json.dumps({"choices": [{"message": {"content": content}}]})


_JOB = SimpleNamespace(
    session_id="s-1",
    provider=SimpleNamespace(base_url="http://p", name="p"),
    headers={},
    query=(),
    fast_model="fast",
    fast_limits=ModelConfig(context_limit=128_000),
    promotion="suggest",
    tenant="t",
    memory_scope="global",
    memory_patterns=(),
)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (_completion(f"Sure! {SECRET}"), "the answer is not JSON"),
        (_completion(json.dumps([SECRET])), "the answer is JSON but not an object"),
        (_completion(json.dumps({"fact": SECRET})), "the answer has no 'facts' list"),
        (_completion(""), "the answer is empty"),
        (f"<html>{SECRET}</html>", "the reply is not a chat completion (JSONDecodeError)"),
        (json.dumps({"error": SECRET}), "the reply is not a chat completion (ValueError)"),
    ],
)
async def test_the_log_line_says_why_without_the_answer(
    body: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    span = [{"role": "user", "content": "we keep the deploy key in vault"}]
    with caplog.at_level(logging.INFO, logger="cascade.memory"):
        await promote(_Upstream(body), None, _Lent(), _JOB, span, count=_count)  # type: ignore[arg-type]
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"memory promotion for s-1: the fast model's answer was refused: {why}"
    )
    assert "vault" not in caplog.text and "zeta" not in caplog.text


class _Broken:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def call(self, *args: Any, **kwargs: Any) -> _Reply:
        raise self.exc


@pytest.mark.parametrize("exc", [LookupError("no provider p"), TypeError("bad argument")])
async def test_a_failed_call_is_not_called_a_bad_reply(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    """An error the call itself raises, before any reply, is a failed promotion named by its
    type; only the reply's parsing is "not a chat completion"."""
    span = [{"role": "user", "content": "we keep the deploy key in vault"}]
    with caplog.at_level(logging.INFO, logger="cascade.memory"):
        await promote(_Broken(exc), None, _Lent(), _JOB, span, count=_count)  # type: ignore[arg-type]
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == f"memory promotion for s-1 failed: {type(exc).__name__}"
    assert "vault" not in caplog.text
