"""Embedding providers (``proxy/embeddings.py``): the builtin model loads offline and ranks by
meaning, a provider's ``/embeddings`` answer is read in order (up to its cap), a model change
is a new name, and the config refuses an embedder it cannot run."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import httpx
import pytest

from proxy import answers
from proxy.config import ConfigError, parse_config
from proxy.embeddings import (
    ApiEmbedder,
    BuiltinEmbedder,
    Embedders,
    EmbeddingError,
    embedding_text,
)
from proxy.upstream import Upstream


def test_the_builtin_model_loads_without_the_network_and_ranks_by_meaning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the builtin embedder tried to connect somewhere")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    emb = BuiltinEmbedder("wordllama-l2-256", 256)
    docs = [
        "We decided to keep the public API stable.",
        "The server listens on port 8443",
        "Dinner was pasta with cheese.",
    ]
    query, *vectors = emb.embed_now(["which port does the server use?", *docs])
    assert all(len(v) == 256 for v in vectors)
    scores = [sum(a * b for a, b in zip(query, v, strict=True)) for v in vectors]
    assert max(range(3), key=scores.__getitem__) == 1
    assert abs(sum(x * x for x in vectors[0]) - 1) < 1e-4  # unit vectors
    assert len(BuiltinEmbedder("wordllama-l2-256:64", 64).embed_now(["x"])[0]) == 64


def test_embedding_text_takes_content_and_tool_calls() -> None:
    call = {"type": "function", "function": {"name": "read", "arguments": '{"p": "src/a.py"}'}}
    msg = {"role": "assistant", "content": "reading", "tool_calls": [call]}
    assert embedding_text(msg) == 'reading\nread {"p": "src/a.py"}'
    assert embedding_text({"role": "tool", "content": [{"type": "text", "text": "ok"}]}) == "ok"
    assert embedding_text({"role": "assistant", "content": None}) == ""


def _api(handler: Any, dimensions: int | None = None) -> ApiEmbedder:
    cfg = parse_config({"providers": {"emb": {"baseUrl": "http://emb.test/v1"}}}, {})
    upstream = Upstream(httpx.AsyncClient(transport=httpx.MockTransport(handler)), env={})
    return ApiEmbedder(upstream, cfg.providers["emb"], "m", dimensions, name="m:4")


def test_a_provider_answer_is_read_in_index_order() -> None:
    seen: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        data = [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1.0, 0.0]}]
        return httpx.Response(200, json={"data": data})

    emb = _api(handler, dimensions=4)
    assert asyncio.run(emb.embed(["a", "b"])) == [[1.0, 0.0], [0.0, 1.0]]
    assert seen == [{"model": "m", "input": ["a", "b"], "dimensions": 4}]
    assert emb.model == "m:4"


@pytest.mark.parametrize(
    "response",
    [httpx.Response(503, text="down"), httpx.Response(200, json={"data": []})],
)
def test_a_failing_provider_is_an_embedding_error(response: httpx.Response) -> None:
    emb = _api(lambda request: response)
    with pytest.raises(EmbeddingError):
        asyncio.run(emb.embed(["a"]))


def test_an_answer_over_the_embeddings_cap_is_an_embedding_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answers, "MAX_EMBEDDINGS_BYTES", 1024)
    emb = _api(lambda request: httpx.Response(200, json={"data": [], "pad": "x" * 2048}))
    with pytest.raises(EmbeddingError, match="cap of 1024 bytes"):
        asyncio.run(emb.embed(["a"]))


def test_a_new_model_or_size_is_a_new_embedder_under_its_own_name() -> None:
    configs = [
        parse_config({}, {}),
        parse_config({"embedding": {"dimensions": 128}}, {}),
        parse_config(
            {
                "providers": {"emb": {"baseUrl": "http://emb.test/v1"}},
                "embedding": {"provider": "emb", "model": "text-embedding-3-small"},
            },
            {},
        ),
    ]
    now = [configs[0]]
    hub = Embedders(lambda: now[0], Upstream(httpx.AsyncClient(), env={}))
    first = hub.current()
    assert hub.current() is first and first.model == "wordllama-l2-256"
    names = []
    for cfg in configs:
        now[0] = cfg
        names.append(hub.current().model)
    assert names == ["wordllama-l2-256", "wordllama-l2-256:128", "text-embedding-3-small"]


@pytest.mark.parametrize(
    ("embedding", "message"),
    [
        ({"model": "hashing-512", "dimensions": 512}, "builtin provider runs wordllama-l2"),
        ({"dimensions": 300}, "builtin provider runs wordllama-l2"),
        ({"provider": "nowhere"}, "neither 'builtin' nor in providers"),
    ],
)
def test_the_config_refuses_an_embedder_it_cannot_run(
    embedding: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"embedding": embedding}, {})
