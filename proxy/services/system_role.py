"""Models that take no system message: the proxy's own instructions go as a user message.

OpenAI's ``o1-mini`` and ``o1-preview`` answer any ``system`` or ``developer`` message with
400 ``unsupported_value`` ("'messages[0].role' does not support 'system' with this model");
``o1`` and the later reasoning models take one. A client of such a model sends none, so the
memory stage puts its ``<memory>`` block at the head as a system message of its own
(``cascade/memory_block.py``), and the fast model's summary and extraction prompts lead
with one: each a 400 the proxy caused. For such a model those go as ``user`` messages with
the same text. A system message the client sent is the client's and goes as it came (the
provider's 400 then names the client's own message). ``models.<name>.systemMessages`` says
it for a model the names here do not know (a deployment's own name), or the reverse.
"""

from __future__ import annotations

import re
from collections.abc import Container, Sequence

from proxy.cascade.types import LEADING_ROLES, Message
from proxy.config import ModelConfig

__all__ = ["as_user", "takes_system"]

_NO_SYSTEM = re.compile(r"(?:^(?:ft:)?|/)o1-(?:mini|preview)(?:$|-)")
"""``o1-mini``, ``o1-preview``, their dated names and a router's ``openai/o1-mini``."""


def takes_system(model: str, limits: ModelConfig) -> bool:
    """Whether ``model`` takes a system message: ``limits.system_messages`` when the config
    sets it, else all but the models ``_NO_SYSTEM`` names."""
    if limits.system_messages is not None:
        return limits.system_messages
    return not _NO_SYSTEM.search(model)


def as_user(messages: Sequence[Message], own: Container[int] | None = None) -> list[Message]:
    """``messages`` with their leading system or developer messages sent as user messages:
    those whose index ``own`` holds (the proxy's own), or all of them when it is None."""
    out: list[Message] = list(messages)
    for i, msg in enumerate(messages):
        if msg.get("role") not in LEADING_ROLES:
            break
        if own is None or i in own:
            out[i] = {**msg, "role": "user"}
    return out
