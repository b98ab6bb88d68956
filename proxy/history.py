"""Canonical JSON, the message hash chain, and reconciliation planning (DESIGN §4).

Clients resend the whole history on every request. Each stored message carries
``chain_hash(previous_hash, message)``, so the hash at position ``i`` identifies the whole
prefix ``messages[0..i]``. Matching an incoming history against the store is then a matter of
comparing hashes: one comparison in the common case (the history was extended), one indexed
lookup when it diverged.

Hashes are taken over a *canonical* form of each message so that a message the proxy stored
from an upstream reply hashes equal to the same message as an OpenAI SDK client sends it back
(``model_dump()`` adds ``refusal: None``, ``annotations: []``, ``tool_calls[].index`` …).
Canonicalisation only affects hashing; stored messages keep every byte the client sent.

Pure: no I/O. The shell (``services/chat.py``) loads hashes and applies the plan.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.jsonio import MAX_FIELD_DEPTH, dumps_sorted

__all__ = [
    "Append",
    "Supersede",
    "canonical_message",
    "canonical_json",
    "chain_hash",
    "chain",
    "hashes_after",
    "plan_reconcile",
    "plan_divergence",
]

_DROP_WHEN_EMPTY = ("annotations", "audio", "refusal", "function_call")
_EMPTY: tuple[Any, ...] = (None, "", [], {})
_NORMALISED_KEYS = frozenset({"tool_calls", *_DROP_WHEN_EMPTY})


@dataclass(frozen=True, slots=True)
class Append:
    """``incoming[start:]`` are new messages; ``start == len(incoming)`` means nothing is new."""

    start: int


@dataclass(frozen=True, slots=True)
class Supersede:
    """Stored positions ``>= from_pos`` are superseded, then ``incoming[from_pos:]`` appended."""

    from_pos: int


def _canonical_tool_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    out: dict[str, Any] = {"type": call.get("type") or "function"}
    if call.get("id") is not None:
        out["id"] = call["id"]
    fn = call.get("function")
    if isinstance(fn, Mapping):
        out["function"] = {k: fn[k] for k in ("name", "arguments") if fn.get(k) is not None}
    elif fn is not None:
        out["function"] = fn
    return out


def canonical_message(msg: Mapping[str, Any]) -> dict[str, Any]:
    """Return the normalised form of ``msg`` used for hashing.

    Invariant: an SDK-style dump of a message (``None`` fields, ``refusal: None``,
    ``annotations: []``, ``tool_calls[].index``, ``content: ""`` beside tool calls) and the
    minimal message carrying the same information canonicalise to the same dict. Unknown
    fields are kept as they are, so messages that really differ still hash differently.
    For assistant messages ``content`` of ``""`` and ``None`` (or absent) are equal; the
    brief only requires this beside ``tool_calls``, but a refusal-only or empty reply has the
    same ambiguity between what the proxy assembles from a stream and what an SDK sends back.
    """
    if (
        msg.get("role") != "assistant"
        and not (msg.keys() & _NORMALISED_KEYS)
        and (None not in msg.values())
    ):
        # Fast path: nothing to normalise (most user, tool and system messages).
        return msg if isinstance(msg, dict) else dict(msg)
    out: dict[str, Any] = {}
    for key, value in msg.items():
        if value is None:
            continue
        if key in _DROP_WHEN_EMPTY and value in _EMPTY:
            continue
        if key == "tool_calls" and isinstance(value, list | tuple):
            if not value:
                continue
            value = [_canonical_tool_call(c) for c in value]
        out[key] = value
    if out.get("role") == "assistant" and out.get("content") == "":
        del out["content"]
    return out


def canonical_json(msg: Mapping[str, Any]) -> str:
    """Deterministic JSON of ``canonical_message(msg)``: sorted keys, no spaces, raw UTF-8."""
    return dumps_sorted(canonical_message(msg)).decode()


def chain_hash(prev: str, msg: Mapping[str, Any], *, levels: int | None = None) -> str:
    """sha256 hex of ``prev + "\\n" + canonical_json(msg)``: identifies the prefix ending at msg.

    orjson, not json: hashing runs over every resent message of every request, and orjson
    writes the canonical form several times faster. ``levels`` as ``dumps_sorted`` takes it.
    """
    data = (prev + "\n").encode() + dumps_sorted(canonical_message(msg), levels=levels)
    return hashlib.sha256(data).hexdigest()


def hashes_after(prevs: Iterable[str], msg: Mapping[str, Any], target: str) -> bool:
    """Whether ``chain_hash(p, msg) == target`` for one of ``prevs``, ``msg``'s canonical form
    written once for them all: a superseded row's previous row is any of those at the
    position before it, and a tool result's form can be megabytes."""
    body = dumps_sorted(canonical_message(msg))
    for prev in prevs:
        digest = hashlib.sha256((prev + "\n").encode())
        digest.update(body)
        if digest.hexdigest() == target:
            return True
    return False


def chain(messages: Sequence[Mapping[str, Any]], seed: str = "") -> list[str]:
    """Running hashes: ``chain(m)[i]`` covers ``m[0..i]``.

    Prefix-stable: ``chain(m[:k]) == chain(m)[:k]``, and ``chain(m[k:], chain(m)[k-1])``
    continues the chain, which is how the shell hashes only the new messages. A client's
    message nested past ``MAX_FIELD_DEPTH`` (a content part the message's own level under
    it) is ``TooDeep``, the bound of a field beside ``messages``.
    """
    hashes: list[str] = []
    prev = seed
    for msg in messages:
        prev = chain_hash(prev, msg, levels=MAX_FIELD_DEPTH + 1)
        hashes.append(prev)
    return hashes


def plan_reconcile(
    incoming_hashes: Sequence[str], *, stored_len: int, stored_head_hash: str | None
) -> Append | None:
    """The O(1) fast path: decide from the stored head alone, or return ``None``.

    An empty store takes everything (``Append(0)``). If the incoming history is at least as
    long as the store and its hash at the store's last position equals the stored head, the
    whole store is a prefix of it (the chain hash covers the prefix), so only
    ``incoming[stored_len:]`` is new. Otherwise the shell must look up the longest common
    prefix and call ``plan_divergence``.
    """
    if stored_len <= 0:
        return Append(0)
    if (
        stored_head_hash is not None
        and len(incoming_hashes) >= stored_len
        and incoming_hashes[stored_len - 1] == stored_head_hash
    ):
        return Append(stored_len)
    return None


def plan_divergence(
    incoming_hashes: Sequence[str], *, matched_len: int, stored_len: int
) -> Append | Supersede:
    """Plan after the fast path failed, given the longest common prefix length.

    ``matched_len`` is 1 + the highest stored position whose hash occurs in
    ``incoming_hashes`` (0 if none). Stored messages past it are no longer part of the
    conversation the client holds, so they are superseded (marked, never deleted) and the
    incoming tail from ``matched_len`` is appended.

    Edge case (regenerate): when the client sends a strict prefix of the stored history,
    ``matched_len == len(incoming_hashes) < stored_len``; the stored tail beyond the prefix is
    superseded and nothing is appended. A plain retry of a request whose reply was already
    stored therefore supersedes that reply, which is what a regenerate means.
    """
    if not 0 <= matched_len <= min(stored_len, len(incoming_hashes)):
        raise ValueError(
            f"matched_len={matched_len} must lie in 0..min(stored_len={stored_len}, "
            f"len(incoming)={len(incoming_hashes)})"
        )
    if matched_len < stored_len:
        return Supersede(matched_len)
    return Append(matched_len)
