"""What of a relayed stream's tool calls reaches the client when ``read_tool_output`` is offered.

The calls of that internal tool are removed and the client's renumbered from 0 (``relay.py``).
A call is told by its name, and some providers send a call's ``id`` (and ``type``) in a
fragment before the one with its name, some even every parallel call's id before any name,
and parallel calls may interleave, a call's first arguments before its name. Each call's
fragments, arguments included, are held until its name comes, dropped with the call if it
is internal, else sent as one fragment. A call whose choice finishes (a finish reason,
``[DONE]``) before any name is the client's, as every call without a name was, and what was
held of it goes out then. A client call also waits behind an earlier call of its choice
whose name has not come: its number among the client's calls depends on whether that one
is the client's.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.cascade.types import READ_TOOL_OUTPUT
from proxy.chunks import index_of

__all__ = ["Calls", "has_tool_calls", "merged", "rewrite"]

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
        internal, else what was held of it and itself, renumbered, with the held calls after
        it that it no longer keeps waiting."""
        key = (which, idx)
        fn = call.get("function") or {}
        if key not in self.internal and fn.get("name"):
            self.internal[key] = fn["name"] == READ_TOOL_OUTPUT
        self.pending.setdefault(key, []).append(call)
        return self._release(which)

    def flush(self, which: int) -> list[dict[str, Any]]:
        """What is held of choice ``which``'s calls, the nameless ones as the client's: its
        calls end (a finish reason, ``[DONE]``)."""
        for key in self.pending:
            if key[0] == which:
                self.internal.setdefault(key, False)
        return self._release(which)

    def _release(self, which: int) -> list[dict[str, Any]]:
        """The held fragments of choice ``which``'s calls that may go now: in call order, up
        to the first call whose name has not come; an internal call's are dropped."""
        out: list[dict[str, Any]] = []
        for key in sorted(k for k in self.pending if k[0] == which):
            if key not in self.internal:
                break
            held = self.pending.pop(key)
            if not self.internal[key]:
                out.append(self._renumbered(key, merged(held)))
        return out

    def _renumbered(self, key: Key, call: dict[str, Any]) -> dict[str, Any]:
        which, idx = key
        client_idx = sum(
            1 for (c, i), v in self.internal.items() if c == which and i < idx and not v
        )
        return call if client_idx == idx else {**call, "index": client_idx}


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One call's held fragments as one, read as ``chunks.StreamAccumulator`` reads them: the
    first of each field, the name put together as it does, the arguments joined (or the
    object a provider sent them as, which goes on as one). A fragment
    with no ``function`` (an id sent alone) is one the openai SDK's stream helper fails on;
    merged with the name after it, the client gets the header OpenAI itself sends."""
    if len(parts) == 1:
        return parts[0]
    out: dict[str, Any] = {}
    name, arguments, fn, whole = "", [], None, None
    for part in parts:
        for key, value in part.items():
            if key != "function":
                if out.get(key) is None:
                    out[key] = value
            elif isinstance(value, dict):
                fn = {**value, **(fn or {})}
                if isinstance(value.get("name"), str) and value["name"] != name:
                    name += value["name"]
                if isinstance(value.get("arguments"), str):
                    arguments.append(value["arguments"])
                elif isinstance(value.get("arguments"), dict | list) and whole is None:
                    whole = value["arguments"]
    if fn is not None:
        text = "".join(arguments)
        args = whole if not text and whole is not None else text
        out["function"] = {**fn, "name": name, "arguments": args}
    return out


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
        which = index_of(choice, pos)
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
