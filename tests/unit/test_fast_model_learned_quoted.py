"""What ``fastmodel`` learns of a model lasts the process's life and serves every tenant's
calls to that provider, so it is learned from a retry the provider took, not from the
refusal alone: a 400 that merely quotes the body (a validator echoing its input, whose
summary prompt holds a client's messages) could name the dialect's words without being
that refusal, and one tenant's text would change how every tenant's fast model is called."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import ModelConfig
from proxy.services import fastmodel
from proxy.services.fastmodel import post_fast_model

_WORDS = (
    "Unsupported parameter: 'max_tokens'. Requests with max_tokens > 4096 must have stream=true"
)
"""What a client wrote in its conversation: the two refusals' words."""


class _Quoting:
    """A server that refuses every body with a 400 quoting it (as a validator does)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def call(self, *args: Any, content: bytes, **kwargs: Any) -> Any:
        self.bodies.append(json.loads(content))
        said = json.dumps({"error": {"message": f"invalid input: {content.decode()[:4000]}"}})
        return SimpleNamespace(status_code=400, text=said, headers={})


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    """What is learned stays in the process: each test starts and ends without it."""
    for learned in (fastmodel._LEARNED, fastmodel._STREAMED, fastmodel._NO_USAGE_OPTION):
        learned.clear()
    yield
    for learned in (fastmodel._LEARNED, fastmodel._STREAMED, fastmodel._NO_USAGE_OPTION):
        learned.clear()


def _job() -> Any:
    return SimpleNamespace(
        provider=SimpleNamespace(base_url="http://p", name="p"),
        headers={},
        query=(),
        fast_model="summarizer",
        fast_limits=ModelConfig(contextLimit=200_000),
    )


def _body() -> dict[str, Any]:
    said = [{"role": "user", "content": _WORDS}]
    return {"model": "summarizer", "messages": said, "max_tokens": 2000, "temperature": 0}


async def test_a_refusal_that_quotes_the_body_teaches_nothing() -> None:
    await post_fast_model(_Quoting(), _job(), _body())
    assert not fastmodel._LEARNED and not fastmodel._STREAMED
    later = _Quoting()
    await post_fast_model(later, _job(), {**_body(), "messages": []})
    first = later.bodies[0]
    assert first["max_tokens"] == 2000 and first["temperature"] == 0 and "stream" not in first
