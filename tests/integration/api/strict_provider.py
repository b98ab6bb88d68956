"""A provider that counts a prompt as OpenAI does and refuses one over the window.

It counts with a real BPE (``o200k_base`` from PyPI ``bpe-openai``, offline): each message's
text plus its framing; the ``tools`` (or legacy ``functions``) array and a ``response_format``
JSON schema as their JSON; images at OpenAI's documented rates (85 for ``detail: low``, else
85 + 170 per 512px tile of the scaled image, read from a PNG data URL's header; 765 when the
size is unknown); and the output the request reserves (``max_completion_tokens`` or
``max_tokens``): prompt plus that output must fit ``limit``. Over it, the answer is OpenAI's
400 ``context_length_exceeded``; under it, ``usage.prompt_tokens`` is the count.
:attr:`StrictProvider.refused` lists what it refused, so a test asserts the proxy never sent
a request that had to fail.
"""

from __future__ import annotations

import base64
import json
import math
import struct
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import bpe_openai

from tests.fakes.replies import Error, RecordedRequest, Reply, context_length_exceeded, reply

__all__ = ["StrictProvider", "bpe_tokens", "image_tokens", "png_data_url", "prompt_tokens"]

_ENC = bpe_openai.get_encoding("o200k_base")
_CHUNK = 100_000  # bpe-openai refuses very long inputs; BPE pieces never span this far


def bpe_tokens(text: str) -> int:
    return sum(len(_ENC.encode(text[i : i + _CHUNK])) for i in range(0, len(text), _CHUNK))


def png_data_url(width: int, height: int) -> str:
    """A data URL whose PNG header says ``width`` x ``height`` (the body is not a real image:
    the provider here reads only the header)."""
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
    header += struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00"
    return "data:image/png;base64," + base64.b64encode(header + b"\x00" * 16).decode()


def _png_size(url: str) -> tuple[int, int] | None:
    if not url.startswith("data:image/png;base64,"):
        return None
    raw = base64.b64decode(url.split(",", 1)[1])
    if len(raw) < 24 or raw[12:16] != b"IHDR":
        return None
    w, h = struct.unpack(">II", raw[16:24])
    return int(w), int(h)


def image_tokens(part: Mapping[str, Any]) -> int:
    """OpenAI's documented cost of one image part (gpt-4o)."""
    image = part.get("image_url")
    image = image if isinstance(image, Mapping) else {"url": image}
    if image.get("detail") == "low":
        return 85
    size = _png_size(str(image.get("url") or ""))
    if size is None:
        return 765
    w, h = size
    scale = min(1.0, 2048 / max(w, h))
    w, h = w * scale, h * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def _content_tokens(content: Any) -> int:
    if isinstance(content, str):
        return bpe_tokens(content)
    total = 0
    if isinstance(content, Sequence):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            if part.get("type") == "text":
                total += bpe_tokens(str(part.get("text") or ""))
            elif part.get("type") in ("image_url", "input_image", "image"):
                total += image_tokens(part)
    return total


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt as the provider counts it (OpenAI cookbook framing: 3 per message, 1 per
    name, 3 priming the reply)."""
    total = 3
    for m in body.get("messages") or ():
        total += 3 + _content_tokens(m.get("content"))
        if m.get("name"):
            total += 1 + bpe_tokens(str(m["name"]))
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            total += (
                3
                + bpe_tokens(str(fn.get("name") or ""))
                + bpe_tokens(str(fn.get("arguments") or ""))
            )
    for key in ("tools", "functions"):
        if body.get(key):
            total += bpe_tokens(json.dumps(body[key], separators=(",", ":")))
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        total += bpe_tokens(json.dumps(fmt.get("json_schema"), separators=(",", ":")))
    return total


def _reserved(body: Mapping[str, Any]) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return 0


class StrictProvider:
    """The agent model's responder for :class:`~tests.integration.api.compaction_stack.Model`
    (``Model(main=StrictProvider(limit))``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.refused: list[tuple[int, int]] = []  # (prompt, reserved output) of each refusal
        self.counts: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, req: RecordedRequest) -> Reply | Error:
        body = req.json
        prompt, out = prompt_tokens(body), _reserved(body)
        with self._lock:
            self.counts.append(prompt)
            if prompt + out > self.limit or prompt >= self.limit:
                self.refused.append((prompt, out))
                return context_length_exceeded(
                    f"This model's maximum context length is {self.limit} tokens. However, "
                    f"you requested {prompt + out} tokens ({prompt} in the messages, "
                    f"{out} in the completion)."
                )
        return reply("ok", usage=(prompt, 1))
