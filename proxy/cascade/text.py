"""What a message's text is: the one definition every stage, counter and store path shares.

A message's ``content`` is a string, ``None``, or a list of parts. The text of a part list is
its ``text`` (or ``refusal``) parts joined by ``\\n``; other parts (images, audio) carry no
text. A summariser still wants to know such a part was there, so ``media=True`` writes each
as ``[type]`` instead of dropping it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, TypeGuard

from proxy.cascade.invisible import visible

__all__ = [
    "append_block",
    "content_text",
    "has_text",
    "part_text",
    "quote_closing_tag",
    "remove_block",
    "whole_block",
    "with_text",
]


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


def has_text(part: Any) -> bool:
    """Whether a content part is text (a string, or a part with a ``text`` or ``refusal``)."""
    return isinstance(part, str) or (
        isinstance(part, Mapping) and any(isinstance(part.get(k), str) for k in ("text", "refusal"))
    )


_PLAIN = frozenset({"type", "text"})


def with_text(content: Any, text: str) -> Any:
    """``content`` with its text rewritten as ``text`` (a stage that cuts or compacts it):
    ``text`` itself, unless ``content`` is a list of parts that holds more than text: a part
    without text (an image, audio, a file), or a text part with other fields (a
    ``cache_control`` breakpoint). Then ``text`` is one text part, with the text parts'
    other fields, in the place of the first text part; the other text parts go, and every
    other part stays where it was: only the text is rewritten, and a part without text
    could not be read back."""
    if not isinstance(content, list) or all(
        isinstance(p, str) or (has_text(p) and p.keys() <= _PLAIN) for p in content
    ):
        return text
    fields: dict[str, Any] = {}
    for part in content:
        if isinstance(part, Mapping) and has_text(part):
            fields.update(part)
    fields.pop("refusal", None)
    merged = {**fields, "type": "text", "text": text}
    out: list[Any] = []
    placed = False
    for part in content:
        if not has_text(part):
            out.append(part)
        elif not placed:
            out.append(merged)
            placed = True
    return out if placed else [merged, *out]


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


def remove_block(msg: Mapping[str, Any], block: str) -> dict[str, Any] | None:
    """``msg`` without the ``block`` :func:`append_block` put in it (the last place it
    stands, even with another block appended after it); None when it holds no such block."""
    content = msg.get("content")
    if isinstance(content, list):
        for i in range(len(content) - 1, -1, -1):
            if content[i] == {"type": "text", "text": block}:
                return {**msg, "content": [*content[:i], *content[i + 1 :]]}
        return None
    if not isinstance(content, str):
        return None
    at = content.rfind(f"\n\n{block}")
    if at >= 0:
        return {**msg, "content": content[:at] + content[at + len(block) + 2 :]}
    if content.startswith(block):
        rest = content[len(block) :]
        return {**msg, "content": rest[2:] if rest.startswith("\n\n") else rest}
    return None


def whole_block(text: object, opening: str | tuple[str, ...], close: str) -> TypeGuard[str]:
    """Whether ``text`` is one whole block as a stage renders it: it begins with ``opening``
    and its first ``close`` ends it. The stages quote the closing tags of what they quote,
    so a block's own closing tag is its first; text after it is not the block's."""
    return (
        isinstance(text, str)
        and text.startswith(opening)
        and text.find(close) == len(text) - len(close)
    )


@cache
def _closing_tag(name: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*/\s*{re.escape(name)}(?![\w-])(?:\s*>)?", re.IGNORECASE)


def quote_closing_tag(text: str, name: str, quoted: str) -> str:
    """``text`` with every closing tag ``</name>`` it holds written as ``quoted``, so a block
    the proxy wraps around it ends where the proxy says. Any spelling a model reads as that
    tag counts (any case, spaces inside, the ``>`` left off, fullwidth forms, a character no
    reader sees inside): the text is read without those (``cascade.invisible``) in its
    compatibility form (NFKC) to find one, and only the characters a tag stands on are
    rewritten: the rest (a ligature, a superscript, an identifier quoted verbatim, the line
    breaks after a tag without its ``>``) stays as it came."""
    tag = _closing_tag(name)
    if not tag.search(unicodedata.normalize("NFKC", visible(text))):
        return text
    pieces = [unicodedata.normalize("NFKC", visible(c)) for c in text]
    owner = [i for i, piece in enumerate(pieces) for _ in piece]  # compat char -> text's
    out, at = [], 0
    for m in tag.finditer("".join(pieces)):
        start = owner[m.start()]
        out += [text[at:start], quoted]
        at = owner[m.end() - 1] + 1
    return "".join([*out, text[at:]])
