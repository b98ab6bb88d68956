"""Embedding providers of the retrieval stage: the built-in wordllama model, or any provider's
OpenAI-compatible ``/embeddings``.

``embedding.provider: "builtin"`` runs wordllama's ``l2_supercat`` weights, which ship inside
the wheel (256 dimensions; 128 or 64 are a cut of the same vector). It is a static
word-embedding model: a text's vector is a weighted mean of its tokens' vectors, so it is
lexical-semantic (it matches words and their near neighbours, not paraphrase the way a
transformer does), needs no network, and embeds a 200-word message in about a millisecond.
It is loaded from the installed package folder with downloads disabled: nothing is fetched.

Any other ``embedding.provider`` names a provider of the config; its ``/embeddings`` is
called through the proxy's one HTTP client (``upstream.Upstream``) with the provider's own
credentials only (embedding runs in the background, where no client's token exists), and
its answer read up to ``answers.MAX_EMBEDDINGS_BYTES``, as a client's embeddings are. The
tokens its answers report go to ``on_usage``, the app's token metrics; the builtin makes
no provider call and reports none.

Every vector is stored with the model's name and the dimension it has (``Embedding.model``,
``len(vector)``); retrieval reads only vectors of the configured model and dimension, so a
change of model never mixes vectors of two spaces.
"""

from __future__ import annotations

import asyncio
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from proxy import answers
from proxy.cascade.redaction import redact_head
from proxy.cascade.text import content_text
from proxy.config import Config, EmbeddingConfig, ProviderConfig
from proxy.jsonio import dumps
from proxy.upstream import Upstream

__all__ = [
    "EMBED_CHARS",
    "EmbeddingError",
    "Embedder",
    "BuiltinEmbedder",
    "ApiEmbedder",
    "Embedders",
    "UsageSink",
    "embedding_text",
    "message_text",
    "embedders_here",
    "bind_embedders",
]

EMBED_CHARS = 8000
"""A stored message is embedded from its first this many characters (its text, and for an
assistant's tool calls their names and arguments): enough for what a snippet can show."""


INLINE_CHARS = 4000
"""The longest single text the builtin embeds on the event loop (a retrieval query's cap)."""


UsageSink = Callable[[str, Any], None]
"""Where a provider embedder reports each answer's ``usage`` (the model sent, the usage as
the provider gave it, None when it gave none): the app's token metrics."""


class EmbeddingError(Exception):
    """The embedder could not answer (provider down, bad answer, model not loadable)."""


class Embedder(Protocol):
    model: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def warm(self) -> None:
        """Get ready to answer a query within a turn's ``timeoutMs`` (load a model)."""


def message_text(message: Mapping[str, Any]) -> str:
    """A stored message's text, then each tool call's name and arguments, where paths and
    ids an agent used often are (pure; uncut)."""
    parts = [content_text(message.get("content"))]
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            parts.append(f"{fn.get('name') or ''} {fn.get('arguments') or ''}")
    return "\n".join(p for p in parts if p).strip()


def embedding_text(message: Mapping[str, Any], patterns: Sequence[re.Pattern[str]] = ()) -> str:
    """What a stored message is embedded from (pure): the first ``EMBED_CHARS`` characters
    of its :func:`message_text`, redacted with ``patterns`` before the cut, so a secret the
    cut runs through goes to the embedding provider in no part (``redact_head``)."""
    return redact_head(message_text(message), EMBED_CHARS, patterns)


class BuiltinEmbedder:
    """wordllama ``l2_supercat`` from the installed package, loaded once on first use."""

    def __init__(self, model: str, dimensions: int) -> None:
        self.model = model
        self.dimensions = dimensions
        self._wl: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        with self._lock:
            if self._wl is None:
                import wordllama  # type: ignore[import-untyped]

                folder = Path(wordllama.__file__).parent
                trunc = self.dimensions if self.dimensions < 256 else None
                try:
                    self._wl = wordllama.WordLlama.load(
                        cache_dir=folder, disable_download=True, dim=256, trunc_dim=trunc
                    )
                except Exception as exc:  # a broken install: retrieval is off, not the proxy
                    raise EmbeddingError(f"the builtin model does not load: {exc}") from exc
            return self._wl

    async def warm(self) -> None:
        """Load the weights on a worker thread unless they are in: a load takes far longer
        than a turn waits for its query, so the background worker does it, not a turn."""
        if self._wl is None:
            await asyncio.to_thread(self.load)

    def embed_now(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors of ``texts``, computed on the calling thread."""
        if not texts:
            return []
        vectors = np.asarray(self.load().embed(list(texts), norm=False), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        out: list[list[float]] = (vectors / norms).tolist()
        return out

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """A batch on a worker thread (it must not hold the event loop); one short text, a
        new turn's query, inline once the model is loaded: it takes well under a
        millisecond, less than the hop to a thread and back on a busy machine."""
        if self._wl is not None and len(texts) == 1 and len(texts[0]) <= INLINE_CHARS:
            return self.embed_now(texts)
        return await asyncio.to_thread(self.embed_now, texts)


class ApiEmbedder:
    """A provider's OpenAI-compatible ``POST /embeddings``."""

    def __init__(
        self,
        upstream: Upstream,
        provider: ProviderConfig,
        model: str,
        dimensions: int | None,
        *,
        name: str | None = None,
        on_usage: UsageSink | None = None,
    ) -> None:
        self.model = name or model  # the name vectors are stored under
        self._model = model
        self._upstream = upstream
        self._provider = provider
        self._dimensions = dimensions
        self._on_usage = on_usage

    async def warm(self) -> None:
        """Nothing to load: the provider holds the model."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        body: dict[str, Any] = {"model": self._model, "input": list(texts)}
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        try:
            answer = await self._upstream.call(
                self._provider,
                "POST",
                "/embeddings",
                client_headers={},
                content=dumps(body),
                model=self._model,
                max_bytes=answers.MAX_EMBEDDINGS_BYTES,
                over_hint="lower the config's embedding.batchSize",
            )
        except Exception as exc:
            raise EmbeddingError(str(exc) or type(exc).__name__) from exc
        if answer.status_code != 200:
            raise EmbeddingError(
                f"embedding provider {self._provider.name!r} answered {answer.status_code}"
            )
        try:
            parsed = answer.json()
            data = sorted(parsed["data"], key=lambda d: d.get("index", 0))
            vectors = [[float(x) for x in d["embedding"]] for d in data]
        except Exception as exc:
            raise EmbeddingError(
                f"embedding provider {self._provider.name!r} sent no embeddings"
            ) from exc
        if self._on_usage is not None:  # a provider's tokens, counted as it reports them
            self._on_usage(self._model, parsed.get("usage"))
        if len(vectors) != len(texts) or len({len(v) for v in vectors}) != 1:
            raise EmbeddingError(f"embedding provider {self._provider.name!r}: wrong shape")
        return vectors


@dataclass(frozen=True, slots=True)
class _Key:
    embedding: EmbeddingConfig
    provider: ProviderConfig | None


class Embedders:
    """The embedder of the current config, rebuilt only when its config changes (a hot
    reload that changes the model starts a new set of vectors; the old ones stay unread)."""

    def __init__(
        self,
        config: Callable[[], Config],
        upstream: Upstream,
        on_usage: UsageSink | None = None,
    ) -> None:
        self._config = config
        self._upstream = upstream
        self._on_usage = on_usage
        self._key: _Key | None = None
        self._embedder: Embedder | None = None

    def current(self) -> Embedder:
        cfg = self._config()
        e = cfg.embedding
        key = _Key(e, None if e.provider == "builtin" else cfg.providers.get(e.provider))
        if key != self._key or self._embedder is None:
            self._embedder = self._build(key)
            self._key = key
        return self._embedder

    def _build(self, key: _Key) -> Embedder:
        """The stored model name carries a dimension asked for that is not the model's own
        (``wordllama-l2-256:128``), so vectors cut to another size are a model of their
        own: the new size is embedded afresh instead of counted as done."""
        e = key.embedding
        if key.provider is None:
            name = e.model if e.dimensions == 256 else f"{e.model}:{e.dimensions}"
            return BuiltinEmbedder(name, e.dimensions)
        explicit = e.dimensions if "dimensions" in e.model_fields_set else None
        name = e.model if explicit is None else f"{e.model}:{explicit}"
        return ApiEmbedder(
            self._upstream, key.provider, e.model, explicit, name=name, on_usage=self._on_usage
        )


_Loop = asyncio.AbstractEventLoop
_HERE: weakref.WeakKeyDictionary[_Loop, Embedders] = weakref.WeakKeyDictionary()


def bind_embedders(embedders: Embedders | None) -> None:
    """Make ``embedders`` the app's on this event loop (the lifespan's; None unbinds). A
    fulfiller is handed a connection and a session only, and each app runs on a loop of its
    own, so the loop is what names the app."""
    loop = asyncio.get_running_loop()
    if embedders is None:
        _HERE.pop(loop, None)
    else:
        _HERE[loop] = embedders


def embedders_here() -> Embedders | None:
    """The embedders the app on this event loop bound, if any."""
    return _HERE.get(asyncio.get_running_loop())
