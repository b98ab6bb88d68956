"""``read_tool_output``'s internal rounds as a turn sees them, between the provider's answers.

A round whose answer calls ``read_tool_output`` (``toolloop.py``) is answered from the store
and the provider is asked again; the client sees one answer however many rounds there were.
Here: the next round's prompt (``internal_round``: the calls answered, each page fitting what
the window has left), the reply the client sees with every round's text in front and only its
own calls (``client_reply``), a completion rewritten so (``fold_completion``), and the ending
of a stream whose last round only called the tool (``closing_frames``). ``forward.py`` runs the
rounds; these are what each of its two paths, whole answers and streams, share of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy import chunks, sse
from proxy.cascade.redaction import patterns_of
from proxy.cascade.types import Message
from proxy.services.budget import page_room
from proxy.services.relay import ClientStream
from proxy.services.toolloop import answer_in_room, split_calls
from proxy.services.turn import Turn

__all__ = ["client_reply", "closing_frames", "fold_completion", "internal_round"]


async def internal_round(
    turn: Turn, messages: list[Message], reply: Mapping[str, Any]
) -> list[Message]:
    """The next round's prompt: ``messages``, the ``reply`` that called ``read_tool_output``,
    and its calls' answers, read from the store, each page fitting what the window has left."""
    step = turn.prepared
    internal, _ = split_calls(reply)
    asked = [*messages, dict(reply)]
    room, cost = page_room(step, asked)  # each page fits what the window has left
    answers: list[Message] = []
    async with turn.connection() as conn:  # for these reads only, not the next call
        for c in internal:
            answers.append(
                await answer_in_room(
                    conn,
                    tenant=step.ctx.tenant,
                    session_id=step.ctx.session_id,
                    call=c,
                    max_chars=step.route.ctx.tool_output.max_chars,
                    room=room,
                    cost=cost,
                    agents=step.ctx.agents,
                    patterns=patterns_of(step.route.ctx.redaction),
                )
            )
            room -= cost(answers[-1])
    return [*asked, *answers]


def client_reply(
    message: Mapping[str, Any], texts: list[str], internal: list[Any], client_calls: list[Any]
) -> dict[str, Any]:
    """The answer as the client saw it: every round's text, only its own calls; with no call
    left, ``""`` when no round wrote text (a provider refuses an assistant message of neither)."""
    reply = {**message, "content": "".join(texts) or message.get("content")}
    if internal:
        reply.pop("tool_calls", None)
        if client_calls:
            reply["tool_calls"] = client_calls
    if not any(reply.get(k) for k in ("tool_calls", "function_call", "refusal", "content")):
        reply["content"] = ""
    return reply


def fold_completion(
    data: dict[str, Any],
    reply: Mapping[str, Any],
    earlier: list[str],
    internal: list[Any],
    client_calls: list[Any],
) -> dict[str, Any]:
    """The last round's completion ``data`` rewritten in place as the client's one answer:
    its message the ``client_reply`` with the ``earlier`` rounds' text in front, and ``stop``
    for its finish when only ``read_tool_output`` was called. Returns that message."""
    folded = client_reply(
        reply, [*earlier, str(reply.get("content") or "")], internal, client_calls
    )
    if client_calls:  # beside calls, a completion's content is null
        folded["content"] = folded.get("content") or None
    data["choices"][0]["message"] = folded
    if internal and not client_calls:
        data["choices"][0]["finish_reason"] = "stop"
    return folded


def closing_frames(
    client: ClientStream, acc: chunks.StreamAccumulator, include_usage: bool
) -> list[bytes]:
    """A finish frame (``stop``) per choice, the usage frame if asked for, and ``[DONE]``: the
    ending of a stream whose last round only called read_tool_output, which the client must
    not see. They carry the identity the client's stream began with."""
    base: dict[str, Any] = {"object": "chat.completion.chunk", **client.head}
    delta = {"content": ""}  # a client that saw no text still ends with a message it can resend
    choices = [{"index": i, "delta": delta, "finish_reason": "stop"} for i in acc.indices or [0]]
    finish = {**base, "choices": choices}
    frames = [sse.encode_event({**finish, "usage": None} if include_usage else finish)]
    if include_usage and acc.usage is not None:
        frames.append(sse.encode_event({**base, "choices": [], "usage": acc.usage}))
    return [*frames, sse.DONE]
