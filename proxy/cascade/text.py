"""What a message's text is: the one definition every stage, counter and store path shares.

A message's ``content`` is a string, ``None``, or a list of parts. The text of a part list is
its ``text`` (or ``refusal``) parts joined by ``\\n``; other parts (images, audio) carry no
text. A summariser still wants to know such a part was there, so ``media=True`` writes each
as ``[type]`` instead of dropping it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["append_block", "content_text", "part_text"]


def part_text(part: Any, *, media: bool = False) -> str:
    """The text of one content part (``""`` for a part without text unless ``media``)."""
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping):
        for key in ("text", "refusal"):
            value = part.get(key)
            if isinstance(value, str):
                return value
        return f"[{part.get('type', 'part')}]" if media else ""
    return str(part) if media else ""


def content_text(content: Any, *, media: bool = False) -> str:
    """The text of a message's content (module docstring); empty parts add no separator."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(t for t in (part_text(p, media=media) for p in content) if t)
    if media:
        return json.dumps(content, ensure_ascii=False, default=str)
    return str(content)


def append_block(msg: Mapping[str, Any], block: str) -> dict[str, Any]:
    """``msg`` with ``block`` appended to its content: an extra text part when the content
    is a list of parts, else after a blank line (the block alone when there is no text).

    The stages that inject a block at the end of a message (memory, retrieval, recitation)
    share it, so a block reads the same whichever stage put it there."""
    content = msg.get("content")
    if isinstance(content, list):
        return {**msg, "content": [*content, {"type": "text", "text": block}]}
    text = "" if content is None else str(content)
    return {**msg, "content": f"{text}\n\n{block}" if text else block}
