"""The handle that names one tool result alone: ``<tool_call_id>@<position>``.

``read_tool_output({"id": …})`` with a bare tool call id reads that id's newest result, and an
id can name more than one result in a session (clients that number their calls ``call_0``
each turn). A handle is frozen in the text that holds it (a truncation marker, an eviction
placeholder, a lossless-compaction marker or pointer), and the id it names can come back
after it is written: the first result's marker is written while that result is the newest.
So every handle the proxy writes for a tool result names it by ``pin``: its id and its
position in the session's history, which no later message changes (a divergence before it
supersedes the handle's holder too). It is pinned always, not only when the id is already
repeated, since a repetition after the handle is frozen is exactly the case to cover; the
cost is the few characters of ``@<position>``.

An observation's handle (``observations.py``) is not pinned: it is a hash of its own text,
so two observations under one handle read back the same bytes.

The store resolves a pinned handle to the result at that position
(``store.raw_outputs``); a bare id still reads the newest result under it.
"""

from __future__ import annotations

import json
import re

__all__ = ["id_args_name", "names", "pin", "unpin"]

_PINNED = re.compile(r"(.+)@(0|[1-9][0-9]{0,9})", re.DOTALL)
MAX_POSITION = 2**31 - 1  # a history position is a database ``integer``


def pin(tool_call_id: str, pos: int) -> str:
    """The handle of the result at history position ``pos`` alone (module docstring)."""
    return f"{tool_call_id}@{pos}"


def unpin(handle: str) -> tuple[str, int] | None:
    """(tool_call_id, position) of a ``pin`` handle; None for any other id, a position past
    any a history holds (``MAX_POSITION``) included: such a handle names no result, and is
    read as the unknown id it is."""
    m = _PINNED.fullmatch(handle)
    return (m[1], int(m[2])) if m and int(m[2]) <= MAX_POSITION else None


def names(handle: object, own: str) -> bool:
    """Whether ``handle`` names a result under the id ``own``: ``own`` itself (a handle
    written bare: an observation's, or one stored before handles were pinned) or a ``pin``
    of it."""
    if not isinstance(handle, str) or not own:
        return False
    if handle == own:
        return True
    pinned = unpin(handle)
    return pinned is not None and pinned[0] == own


def id_args_name(args_json: str, own: str) -> bool:
    """Whether ``args_json`` is ``read_tool_output``'s arguments ``{"id": …}`` alone, naming a
    handle of ``own`` (``names``): the form an eviction placeholder and a compacted result's
    first line write."""
    try:
        args = json.loads(args_json)
    except (ValueError, RecursionError):  # no JSON, or a client's nested past the recursion limit
        return False
    return isinstance(args, dict) and list(args) == ["id"] and names(args["id"], own)
