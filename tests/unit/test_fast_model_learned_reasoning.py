"""A reasoning model under a name the proxy cannot read as one (an Azure deployment named
``summarizer``, a gateway's alias) refuses the summary's ``max_tokens`` as OpenAI words it:
the call goes again as such a model takes it (``max_completion_tokens``, no temperature),
and the name is one from then on, so the next prompt leaves its thinking room."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import ModelConfig
from proxy.services import fastmodel
from proxy.services.fastmodel import REASONING_ROOM, output_tokens, post_fast_model

_REFUSAL = json.dumps(
    {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model."
            " Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }
)


_TEMPERATURE = json.dumps(
    {
        "error": {
            "message": "Unsupported value: 'temperature' does not support 0 with this model."
            " Only the default (1) value is supported.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    }
)


class _Upstream:
    def __init__(self, refusal: str = _REFUSAL) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refusal = refusal

    async def call(self, *args: Any, content: bytes, **kwargs: Any) -> Any:
        body = json.loads(content)
        self.bodies.append(body)
        if "max_tokens" in body or "temperature" in body:
            return SimpleNamespace(status_code=400, text=self.refusal, headers={})
        text = json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]})
        return SimpleNamespace(status_code=200, text=text, json=lambda: json.loads(text))


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    """The names learned stay in the process: each test starts and ends without them."""
    fastmodel._LEARNED.clear()
    yield
    fastmodel._LEARNED.clear()


def _job(model: str, at: str = "http://p") -> SimpleNamespace:
    return SimpleNamespace(
        provider=SimpleNamespace(base_url=at, name="p"),
        headers={},
        query=(),
        fast_model=model,
        fast_limits=ModelConfig(contextLimit=200_000),
    )


@pytest.mark.parametrize("refusal", [_REFUSAL, _TEMPERATURE], ids=["max_tokens", "temperature"])
async def test_a_refused_max_tokens_goes_again_as_a_reasoning_model_takes_it(refusal: str) -> None:
    model = "summarizer-deployment-7f3a"
    assert output_tokens(model, 2000, 200_000, at="http://p") == 2000
    upstream = _Upstream(refusal)
    body = {"model": model, "messages": [], "max_tokens": 2000, "temperature": 0}
    resp = await post_fast_model(upstream, _job(model), body)
    assert resp.status_code == 200
    first, second = upstream.bodies
    assert first["max_tokens"] == 2000 and first["temperature"] == 0
    assert "max_tokens" not in second and "temperature" not in second
    assert second["max_completion_tokens"] == 2000 + REASONING_ROOM
    learned = output_tokens(model, 2000, 200_000, at="http://p")
    assert learned == 2000 + REASONING_ROOM
    again = _Upstream()
    await post_fast_model(again, _job(model), body)
    assert len(again.bodies) == 1 and "max_completion_tokens" in again.bodies[0]


async def test_another_refusal_is_not_sent_again() -> None:
    class _Other(_Upstream):
        async def call(self, *args: Any, content: bytes, **kwargs: Any) -> Any:
            self.bodies.append(json.loads(content))
            said = json.dumps({"error": {"message": "The model `x` does not exist"}})
            return SimpleNamespace(status_code=404, text=said, headers={})

    upstream = _Other()
    body = {"model": "x", "messages": [], "max_tokens": 2000, "temperature": 0}
    assert (await post_fast_model(upstream, _job("x"), body)).status_code == 404
    assert len(upstream.bodies) == 1
    assert output_tokens("x", 2000, at="http://p") == 2000


async def test_a_name_learned_at_one_provider_is_not_one_at_another() -> None:
    """A deployment name is the provider's own: ``summarizer`` at an Azure resource may be a
    reasoning model while ``summarizer`` at a vLLM server is not, and that server ignores
    ``max_completion_tokens`` (its output unbounded) and keeps its whole window for the
    prompt."""
    model = "summarizer"
    azure = _job(model, "https://res.openai.azure.com/openai/v1")
    await post_fast_model(_Upstream(), azure, {"model": model, "max_tokens": 2000})
    assert output_tokens(model, 2000, 200_000, at=azure.provider.base_url) > 2000  # learned there
    vllm = _job(model, "http://vllm.internal:8000/v1")
    assert output_tokens(model, 2000, 200_000, at=vllm.provider.base_url) == 2000
    taken = _Taken()
    await post_fast_model(taken, vllm, {"model": model, "max_tokens": 2000, "temperature": 0})
    assert taken.bodies == [{"model": model, "max_tokens": 2000, "temperature": 0}]


class _Taken(_Upstream):
    """A server that takes any body (``max_tokens`` included)."""

    async def call(self, *args: Any, content: bytes, **kwargs: Any) -> Any:
        self.bodies.append(json.loads(content))
        text = json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]})
        return SimpleNamespace(status_code=200, text=text, json=lambda: json.loads(text))


async def test_a_name_learned_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """Learning a name changes every later call to it and the room its prompts leave, for
    the process's life: the operator reads it once, naming the model and where, not at each
    call."""
    model = "summarizer-deployment-7f3a"
    body = {"model": model, "messages": [], "max_tokens": 2000, "temperature": 0}
    with caplog.at_level(logging.INFO, logger="cascade.compaction"):
        await post_fast_model(_Upstream(), _job(model), body)
        await post_fast_model(_Upstream(), _job(model), body)
    said = [r.getMessage() for r in caplog.records if "max_completion_tokens" in r.getMessage()]
    assert len(said) == 1 and model in said[0] and "http://p" in said[0]
