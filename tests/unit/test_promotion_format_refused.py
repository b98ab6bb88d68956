"""A fast model whose provider has no structured outputs still gets its facts extracted.

DeepSeek takes ``response_format`` ``json_object`` only and answers 400 "This response_format
type is unavailable now" to the ``json_schema`` one the extraction asks for (Groq's models
without structured outputs refuse it too): memory promotion on such a fast model failed at
every compaction. A refusal naming the field asks once more without it; the prompt asks for
the same JSON object, and ``parse_facts`` reads it through fences and words around it."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import ModelConfig
from proxy.services import promotion
from proxy.services.promotion import promote

_DEEPSEEK_400 = json.dumps(
    {
        "error": {
            "message": "This response_format type is unavailable now",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }
)


class _Upstream:
    """Refuses a ``json_schema`` response format as DeepSeek does; answers facts otherwise."""

    def __init__(self, refusal: tuple[int, str] = (400, _DEEPSEEK_400)) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refusal = refusal

    async def call(self, *args: Any, content: bytes, **kwargs: Any) -> Any:
        body = json.loads(content)
        self.bodies.append(body)
        if (body.get("response_format") or {}).get("type") == "json_schema":
            status, text = self.refusal
            return SimpleNamespace(status_code=status, text=text, headers={})
        said = '```json\n{"facts": ["The API listens on port 8443."]}\n```'
        answer = json.dumps({"choices": [{"message": {"content": said}}]})
        return SimpleNamespace(status_code=200, text=answer, json=lambda: json.loads(answer))


class _Lent:
    async def give_back(self) -> None:
        pass

    async def take(self) -> Any:
        return None


def _job() -> SimpleNamespace:
    return SimpleNamespace(
        session_id="s-1",
        provider=SimpleNamespace(base_url="http://p"),
        headers={},
        query=(),
        fast_model="deepseek-chat",
        fast_limits=ModelConfig(context_limit=64000, reserved_output=500),
        promotion="auto",
        tenant="t",
        memory_scope="global",
        memory_patterns=(),
    )


def _count(messages: Any) -> int:
    return sum(len(str(m.get("content") or "")) // 4 + 4 for m in messages)


_SPAN = [{"role": "user", "content": "the API listens on port 8443"}]
_GROQ_400 = json.dumps(
    {
        "error": {
            "message": "This model does not support response format `json_schema`.",
            "type": "invalid_request_error",
        }
    }
)

_GEMINI_400 = json.dumps(
    [
        {
            "error": {
                "code": 400,
                "message": 'Invalid JSON payload received. Unknown name "additionalProperties"'
                " at 'generation_config.response_schema': Cannot find field.",
                "status": "INVALID_ARGUMENT",
            }
        }
    ]
)
"""Gemini's OpenAI endpoint refusing a keyword of the schema it turns ``json_schema`` into
(its ``response_schema``), in its list of one error: the field it names is its own."""


@pytest.mark.parametrize(
    "refusal",
    [(400, _DEEPSEEK_400), (400, _GROQ_400), (400, _GEMINI_400)],
    ids=["deepseek", "groq", "gemini"],
)
async def test_a_refused_json_schema_is_asked_again_without_it(
    refusal: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stored: list[list[str]] = []

    async def add_facts(conn: Any, *, texts: list[str], **kwargs: Any) -> None:
        stored.append(list(texts))

    monkeypatch.setattr(promotion.store, "add_facts", add_facts)
    upstream = _Upstream(refusal)
    await promote(upstream, None, _Lent(), _job(), _SPAN, count=_count)  # type: ignore[arg-type]
    assert [b.get("response_format", {}).get("type") for b in upstream.bodies] == [
        "json_schema",
        None,
    ]
    assert upstream.bodies[1]["messages"] == upstream.bodies[0]["messages"]
    assert stored == [["The API listens on port 8443."]]


async def test_another_refusal_is_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    other = json.dumps({"error": {"message": "Invalid model", "type": "invalid_request_error"}})
    upstream = _Upstream((400, other))
    await promote(upstream, None, _Lent(), _job(), _SPAN, count=_count)  # type: ignore[arg-type]
    assert len(upstream.bodies) == 1
