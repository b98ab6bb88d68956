"""What of a relayed stream's tool calls reaches the client when ``read_tool_output`` is offered.

The calls of that internal tool are removed and the client's renumbered from 0 (``relay.py``).
A call is told by its name, and some providers send a call's ``id`` (and ``type``) in a
fragment before the one with its name: such fragments are held until the name comes, and
dropped with the call if it is internal. Only fragments without arguments are held; a call
that gets arguments, a next call, a finish reason or ``[DONE]`` before any name is the
client's, as every call without a name was, and what was held of it goes out then.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.cascade.types import READ_TOOL_OUTPUT
from proxy.chunks import index_of

__all__ = ["Calls", "has_tool_calls", "rewrite"]

Key = tuple[int, int]  # (choice index, upstream tool index): each choice numbers its calls


@dataclass(slots=True)
class Calls:
    """The round's calls so far: ``internal`` says of each named one whether it is the
    proxy's; ``pending`` holds the fragments of calls whose name has not come yet."""

    internal: dict[Key, bool] = field(default_factory=dict)
    pending: dict[Key, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def only_internal(self) -> bool:
        return bool(self.internal) and all(self.internal.values())

    def route(self, which: int, idx: int, call: dict[str, Any]) -> list[dict[str, Any]]:
        """The fragments to send for ``call``: none while its name is unknown or when it is
        internal, else what was held of it and itself, renumbered; a held call before it
        goes out first (a next call began)."""
        key = (which, idx)
        fn = call.get("function") or {}
        out = self.flush(which, but=key)
        if key not in self.internal:
            if fn.get("name"):
                self.internal[key] = fn["name"] == READ_TOOL_OUTPUT
            elif not fn.get("arguments"):
                self.pending.setdefault(key, []).append(call)
                return out
            else:
                self.internal[key] = False
        held = self.pending.pop(key, [])
        if self.internal[key]:
            return out
        return [*out, *(self._renumbered(key, c) for c in [*held, call])]

    def flush(self, which: int, *, but: Key | None = None) -> list[dict[str, Any]]:
        """What is held of choice ``which``'s calls (but ``but``), as client calls' fragments."""
        out: list[dict[str, Any]] = []
        for key in [k for k in self.pending if k[0] == which and k != but]:
            self.internal[key] = False
            out += [self._renumbered(key, c) for c in self.pending.pop(key)]
        return out

    def _renumbered(self, key: Key, call: dict[str, Any]) -> dict[str, Any]:
        which, idx = key
        client_idx = sum(
            1 for (c, i), v in self.internal.items() if c == which and i < idx and not v
        )
        return call if client_idx == idx else {**call, "index": client_idx}


def has_tool_calls(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and isinstance(c.get("delta"), dict) and c["delta"].get("tool_calls")
        for c in choices
    )


def rewrite(chunk: dict[str, Any], calls: Calls) -> dict[str, Any] | None:
    """``chunk`` as the client gets it: itself when no call in it changes, else a copy (the
    parsed chunk stays as parsed); None when nothing is left of it."""
    choices = list(chunk.get("choices") or [])
    changed = False
    for pos, choice in enumerate(choices):
        delta = choice.get("delta") or {}
        sent = delta.get("tool_calls") or []
        which = choice.get("index", pos)
        kept = [
            c for k, call in enumerate(sent) for c in calls.route(which, index_of(call, k), call)
        ]
        if choice.get("finish_reason") is not None:
            kept += calls.flush(which)
        if kept != sent:
            changed = True
            delta = {k: v for k, v in delta.items() if k != "tool_calls"}
            choices[pos] = {**choice, "delta": {**delta, "tool_calls": kept} if kept else delta}
    if not changed:
        return chunk
    if choices and all(not c.get("delta") and c.get("finish_reason") is None for c in choices):
        return None
    return {**chunk, "choices": choices}
