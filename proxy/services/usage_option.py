"""The ``stream_options`` the proxy adds to a stream, and the providers that refuse it.

The proxy asks every stream for ``stream_options.include_usage``: the provider's real prompt
size is what occupancy rests on. Some OpenAI-compatible servers validate their body strictly
and refuse a field they do not know (older vLLM, Fireworks, Databricks' gateway: a 400 or
422 "Extra inputs are not permitted" naming ``stream_options``), so every stream through the
proxy would fail where the client, which sent no such field, works direct. Such a refusal of
the field the proxy added sends the call again without it, and the provider (its
``baseUrl``) is remembered for the process's life once the provider takes that call: its
later streams go without it, and their occupancy is the calibrated estimate, as for a
provider that reports no usage. A client that sent ``stream_options`` itself (not null)
gets the provider's answer to it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from proxy import answers
from proxy.config import ProviderConfig
from proxy.provider_errors import provider_name
from proxy.upstream import StreamAnswer

__all__ = ["UsageOption"]

log = logging.getLogger("cascade.forward")

_REFUSALS = frozenset({400, 422})
"""A refused field: OpenAI-shaped servers answer 400, FastAPI's own validation 422."""


class UsageOption:
    """Which providers get the proxy's ``stream_options``; ``open`` sends a stream's call."""

    def __init__(self) -> None:
        self._refused: set[str] = set()

    async def open(
        self,
        provider: ProviderConfig,
        body: Mapping[str, Any],
        send: Callable[[bool], Awaitable[StreamAnswer]],
    ) -> StreamAnswer:
        """``send(usage)`` with ``usage`` true unless ``provider`` refused it before; once
        more without it when the provider refuses the ``stream_options`` the proxy added.
        The provider is remembered only when the provider takes that call: a refusal that
        merely quotes the body (a client's own error echoing what it was sent) names the
        field without being about it, and must not cost that provider's later streams their
        usage, every tenant's."""
        if body.get("stream_options") is not None:  # the client's own: the answer is its
            return await send(True)
        if provider.base_url in self._refused:
            return await send(False)
        answer = await send(True)
        if answer.status_code not in _REFUSALS:
            return answer
        try:
            refusal = await answer.aread(answers.MAX_ANSWER_BYTES)  # kept for its relay
        except BaseException:  # broke off, stalled, too large, or the client left: no one
            await answer.aclose()  # else holds the answer to give its connection back
            raise
        if b"stream_options" not in refusal:
            return answer
        await answer.aclose()
        again = await send(False)
        if again.status_code >= 400:  # refused without it too, or failed otherwise (a rate
            return again  # limit, an outage): nothing shows the field was why
        if provider.base_url in self._refused:  # another stream learned it meanwhile
            return again
        self._refused.add(provider.base_url)
        log.warning(
            "%s refused the stream_options.include_usage the proxy adds (%d); its streams go"
            " without it from now on, their occupancy estimated",
            provider_name(provider),
            answer.status_code,
        )
        return again
