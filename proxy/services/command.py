"""The ``/compact`` chat command: compacted by the proxy, answered by the proxy.

The exchange never reaches the upstream model; the reply is stored like any other (its
prefix keeps it out of later prompts, ``cascade.commands``), and the turn ends with it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

import anyio
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from proxy import chunks, sse
from proxy.cascade.commands import compact_reply_text
from proxy.jsonio import dumps
from proxy.services.turn import Turn

__all__ = ["answer_command"]

_JSON = "application/json"


async def answer_command(turn: Turn) -> Response:
    """Answer ``/compact`` with what the compaction did, as a completion or a stream."""
    step = turn.prepared
    assert step.command is not None
    c = step.command
    text = compact_reply_text(
        version=c.version,
        folded=c.folded,
        tokens_before=c.tokens_before,
        tokens_after=c.tokens_after,
        reason=c.reason,
    )
    reply = {"role": "assistant", "content": text}
    completion = {
        "id": f"chatcmpl-cascade-{secrets.token_hex(8)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": step.route.model,
        "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }
    if not step.stream:
        task = BackgroundTask(turn.finish, reply, None)
        return Response(dumps(completion), 200, media_type=_JSON, background=task)

    async def body() -> AsyncIterator[bytes]:
        try:
            for frame in chunks.completion_to_chunks(
                completion, include_usage=step.client_wants_usage
            ):
                yield frame
        finally:
            with anyio.CancelScope(shield=True):
                await turn.finish(reply, None)

    return StreamingResponse(body(), headers=sse.STREAM_HEADERS, media_type="text/event-stream")
