"""``fastmodel.post_fast_model``'s retry of a call refused unstreamed for its output bound
(Fireworks: "Requests with max_tokens > 4096 must have stream=true"): streamed, asking for
the usage the answer's metrics count, and without that ask where a strict server refuses
it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import ModelConfig
from proxy.services import fastmodel
from proxy.services.fastmodel import post_fast_model

_WANTS_STREAM = json.dumps(
    {"error": {"message": "Requests with max_tokens > 4096 must have stream=true"}}
)
_NO_STREAM_OPTIONS = json.dumps(
    {"detail": [{"type": "extra_forbidden", "loc": ["body", "stream_options"], "msg": "x"}]}
)


class _Upstream:
    """Answers each call with the next of ``replies`` (status, text), recording bodies."""

    def __init__(self, *replies: tuple[int, str]) -> None:
        self.replies = list(replies)
        self.bodies: list[dict[str, Any]] = []

    async def call(self, *args: Any, content: bytes, **kwargs: Any) -> Any:
        self.bodies.append(json.loads(content))
        status, text = self.replies.pop(0)
        return SimpleNamespace(status_code=status, text=text)


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    """What is learned stays in the process: each test starts and ends without it."""
    fastmodel._STREAMED.clear()
    fastmodel._NO_USAGE_OPTION.clear()
    yield
    fastmodel._STREAMED.clear()
    fastmodel._NO_USAGE_OPTION.clear()


def _job() -> Any:
    return SimpleNamespace(
        provider=SimpleNamespace(base_url="https://api.fireworks.ai/inference/v1"),
        headers={},
        query=(),
        fast_model="accounts/fireworks/models/qwen3-30b-a3b",
        fast_limits=ModelConfig(contextLimit=128_000),
    )


def _body() -> dict[str, Any]:
    return {"model": "m", "messages": [], "max_tokens": 2000, "temperature": 0}


async def test_the_streamed_retry_asks_for_the_usage_it_counts() -> None:
    upstream = _Upstream((400, _WANTS_STREAM), (200, "data: [DONE]\n\n"))
    resp = await post_fast_model(upstream, _job(), _body())
    assert resp.status_code == 200
    first, streamed = upstream.bodies
    assert "stream" not in first
    assert streamed["stream"] is True
    assert streamed["stream_options"] == {"include_usage": True}
    assert streamed["max_tokens"] == first["max_tokens"]


async def test_a_server_refusing_stream_options_is_asked_once_more_without_them() -> None:
    upstream = _Upstream((400, _WANTS_STREAM), (422, _NO_STREAM_OPTIONS), (200, "data: [DONE]"))
    resp = await post_fast_model(upstream, _job(), _body())
    assert resp.status_code == 200
    *_, last = upstream.bodies
    assert len(upstream.bodies) == 3
    assert last["stream"] is True and "stream_options" not in last


async def test_a_model_that_asked_for_a_stream_is_called_streamed_from_then_on() -> None:
    """Every summary and extraction would otherwise draw the same refusal first."""
    upstream = _Upstream((400, _WANTS_STREAM), (200, "data: [DONE]"), (200, "data: [DONE]"))
    await post_fast_model(upstream, _job(), _body())
    await post_fast_model(upstream, _job(), _body())
    assert len(upstream.bodies) == 3
    assert upstream.bodies[2]["stream"] is True
    assert upstream.bodies[2]["stream_options"] == {"include_usage": True}


async def test_a_server_that_refused_stream_options_is_streamed_without_them_from_then_on() -> None:
    upstream = _Upstream(
        (400, _WANTS_STREAM), (422, _NO_STREAM_OPTIONS), (200, "data: [DONE]"), (200, "data: x")
    )
    await post_fast_model(upstream, _job(), _body())
    await post_fast_model(upstream, _job(), _body())
    assert len(upstream.bodies) == 4
    assert upstream.bodies[3]["stream"] is True and "stream_options" not in upstream.bodies[3]
