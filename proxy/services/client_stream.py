"""The one stream a client sees, however many upstream rounds make it up.

A request that offers ``read_tool_output`` may call the provider several times, and each
round's stream has its own chunk id, ``created`` and role frame. ``ClientStream`` makes them
one: a later round's frames take the first round's identity and lose a repeated ``role``
(clients that accumulate deltas, the openai SDK's stream helper, concatenate every string they
get, the role included), and a first frame that says nothing but the role waits for one that
says more, so a round that calls only the proxy's tool sends no byte (``relay.py``), and
what such a round held goes out as the middle of the one stream (``unfinished``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy import chunks, sse

__all__ = ["ClientStream", "empty_choice", "unfinished"]

_IDENTITY = ("id", "created", "model", "system_fingerprint")


@dataclass(slots=True)
class ClientStream:
    """What the client has seen of its one stream, which may span several upstream rounds.

    ``head`` keeps the first value of each identity field (the first round's chunk id, …);
    ``roles`` the choice indices whose ``role`` already went out. With ``read_tool_output``
    offered, a frame that says nothing but the role waits in ``bare`` for the first that says
    more: a round that calls only the proxy's tool then sends nothing, and a later round's
    provider error can still be the response's status (``Forwarder.stream``).
    """

    head: dict[str, Any] = field(default_factory=dict)
    roles: set[int] = field(default_factory=set)
    opened: bool = False  # a byte went out: the status is committed
    bare: list[bytes] = field(default_factory=list)  # role-only frames held until then

    def hold_bare(self, chunk: dict[str, Any], data: bytes) -> bool:
        """Hold ``data`` (``chunk``'s frame) if it is bare and nothing else was decided yet
        (so it stays ahead of every frame); else the stream is as good as open."""
        if not self.opened and _bare(chunk):
            self.bare.append(data)
            return True
        self.opened = True
        return False

    def emit(self, data: bytes) -> bytes:
        """``data`` as it goes out, after the bare frames held before it."""
        self.opened = True
        if self.bare:
            data, self.bare = b"".join((*self.bare, data)), []
        return data

    def align(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        """``chunk`` as part of the one stream: itself when nothing differs (so its bytes go
        out untouched), else a copy with the head's identity and without a repeated role;
        ``None`` when only a repeated role was in it."""
        fix = self._identity(chunk)
        choices = chunk.get("choices")
        repeated = []
        for pos, choice in enumerate(choices if isinstance(choices, list) else []):
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and delta.get("role") is not None:
                index = chunks.index_of(choice, pos)
                if index in self.roles:
                    repeated.append(pos)
                self.roles.add(index)
        if not fix and not repeated:
            return chunk
        aligned = {**chunk, **fix}
        if repeated:
            kept = list(choices)  # type: ignore[arg-type]
            for pos in repeated:
                delta = {k: v for k, v in kept[pos]["delta"].items() if k != "role"}
                kept[pos] = {**kept[pos], "delta": delta}
            if all(empty_choice(c) for c in kept) and aligned.get("usage") is None:
                return None
            aligned["choices"] = kept
        return aligned

    def _identity(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """The head's values where ``chunk``'s differ; the head takes each field's first. A
        chunk of no choices before any with some (Azure's ``prompt_filter_results`` one, whose
        id and model are empty) sets none: the completion's own come with its choices."""
        if not self.head and not chunk.get("choices"):
            return {}
        fix = {}
        for key in _IDENTITY:
            if key not in chunk:
                continue
            if key not in self.head:
                self.head[key] = chunk[key]
            elif chunk[key] != self.head[key]:
                fix[key] = self.head[key]
        return fix


def empty_choice(choice: Any) -> bool:
    """Whether a streamed ``choice`` says nothing: no delta, finish reason or logprobs."""
    return (
        isinstance(choice, dict)
        and not choice.get("delta")
        and (choice.get("finish_reason") is None and choice.get("logprobs") is None)
    )


def _bare(chunk: dict[str, Any]) -> bool:
    """Whether ``chunk`` says nothing but a role: choices whose deltas' other fields are
    empty, with no finish reason or logprobs, and no usage."""
    choices = chunk.get("choices")
    if not choices or not isinstance(choices, list) or chunk.get("usage") is not None:
        return False
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict) or not empty_choice({**choice, "delta": {}}):
            return False
        if any(v not in (None, "") for k, v in delta.items() if k != "role"):
            return False
    return True


def unfinished(held: list[bytes]) -> list[bytes]:
    """The held frames of a round that called only internal tools, as the stream goes on: no
    finish reason, usage or ``[DONE]``, but whatever text came with the finish reason."""
    out = []
    for event in held:
        if sse.is_done(event):  # what a provider sent after it is no part of the answer
            break
        chunk = sse.parse_chunk(event)
        if chunk is None or sse.is_usage_only(chunk):
            continue
        choices = [{**c, "finish_reason": None} for c in chunk.get("choices") or []]
        choices = [c for c in choices if not empty_choice(c)]
        if choices:
            chunk = {**chunk, "choices": choices}
            if chunk.get("usage") is not None:
                chunk["usage"] = None
            out.append(sse.reframe(event, chunk))
    return out
