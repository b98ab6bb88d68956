"""The fact extraction's request fits the fast model's window: a folded span larger than it
is cut to its newest text, as the summary's prompt is, so a fast model smaller than the main
one is not sent a request it must refuse."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from proxy.config import ModelConfig
from proxy.services.promotion import promote


def _count(messages: Sequence[Any]) -> int:
    return sum(len(str(m.get("content") or "")) // 4 + 4 for m in messages)


class _Upstream:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def call(self, *args: Any, content: bytes, **kwargs: Any) -> Any:
        self.bodies.append(json.loads(content))
        answer = json.dumps({"choices": [{"message": {"content": '{"facts": []}'}}]})
        return SimpleNamespace(status_code=200, text=answer, json=lambda: json.loads(answer))


class _Lent:
    async def give_back(self) -> None:
        pass

    async def take(self) -> Any:
        return None


def _job(fast_limit: int) -> SimpleNamespace:
    return SimpleNamespace(
        session_id="s-1",
        provider=SimpleNamespace(base_url="http://p"),
        headers={},
        query=(),
        fast_model="fast",
        fast_limits=ModelConfig(context_limit=fast_limit, reserved_output=500),
        promotion="suggest",
        tenant="t",
        memory_scope="global",
        memory_patterns=(),
    )


async def test_a_span_larger_than_the_fast_window_is_cut_to_its_newest_text() -> None:
    old = "the oldest line of the span; " * 1500
    span = [
        {"role": "user", "content": old},
        {"role": "tool", "content": "a middle result; " * 1500},
        {"role": "user", "content": "the newest fact: the API listens on port 8443"},
    ]
    upstream = _Upstream()
    await promote(upstream, None, _Lent(), _job(4000), span, count=_count)  # type: ignore[arg-type]
    [body] = upstream.bodies
    assert _count(body["messages"]) + body["max_tokens"] <= 4000
    text = body["messages"][-1]["content"]
    assert text.endswith("the API listens on port 8443") and "oldest line" not in text


async def test_a_span_that_fits_goes_whole() -> None:
    span = [{"role": "user", "content": "we deploy with make release"}]
    upstream = _Upstream()
    await promote(upstream, None, _Lent(), _job(4000), span, count=_count)  # type: ignore[arg-type]
    [body] = upstream.bodies
    assert body["messages"][-1]["content"] == "[user]\nwe deploy with make release"


async def test_a_fast_window_too_small_for_any_text_is_not_asked() -> None:
    span = [{"role": "user", "content": "we deploy with make release"}]
    upstream = _Upstream()
    await promote(upstream, None, _Lent(), _job(1200), span, count=_count)  # type: ignore[arg-type]
    assert upstream.bodies == []
