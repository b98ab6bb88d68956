"""What one image part costs in a prompt, by OpenAI's documented rule for tile-based vision.

``detail: low`` is a flat :data:`LOW_DETAIL_TOKENS`. Otherwise (``high``, ``auto``) the image
is scaled to fit 2048 x 2048, then its short side down to 768, and it costs
:data:`LOW_DETAIL_TOKENS` plus :data:`TILE_TOKENS` per 512px tile. The size is read from a data
URL's header (PNG, GIF, JPEG, WebP); an image whose size is not known here (a remote URL, a
header not found) is priced at :data:`MAX_IMAGE_TOKENS`, the most any image can cost, so the
overflow guard never counts one low.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Mapping
from typing import Any

__all__ = ["LOW_DETAIL_TOKENS", "TILE_TOKENS", "MAX_IMAGE_TOKENS", "image_tokens", "image_size"]

LOW_DETAIL_TOKENS = 85
TILE_TOKENS = 170
MAX_IMAGE_TOKENS = LOW_DETAIL_TOKENS + TILE_TOKENS * 8
"""A 768 x 2048 layout (2 x 4 tiles): no image scales to more tiles."""
_HEADER_CHARS = 87_384
"""Base64 characters decoded to look for the size: 64 KiB, enough for a JPEG's EXIF block."""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            i += 2
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a frame header
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return w, h
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        i += 2 + length
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the first bytes of a PNG, GIF, JPEG or WebP file, else None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return w, h
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
        return w, h
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        kind = data[12:16]
        if kind == b"VP8X":
            w = int.from_bytes(data[24:27], "little") + 1
            h = int.from_bytes(data[27:30], "little") + 1
            return w, h
        if kind == b"VP8 ":
            w, h = struct.unpack("<HH", data[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if kind == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _data_url_size(url: str) -> tuple[int, int] | None:
    if not url.startswith("data:"):
        return None
    meta, sep, payload = url.partition(",")
    if not sep or not meta.endswith(";base64"):
        return None
    head = payload[:_HEADER_CHARS].strip()
    head = head[: len(head) // 4 * 4]
    try:
        return image_size(base64.b64decode(head))
    except (binascii.Error, ValueError, struct.error):
        return None


def _tiles(width: int, height: int) -> int:
    w, h = float(width), float(height)
    scale = min(1.0, 2048 / max(w, h))
    w, h = w * scale, h * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return math.ceil(w / 512) * math.ceil(h / 512)


def image_tokens(part: Mapping[str, Any]) -> int:
    """The tokens of one image content part (``image_url``, ``input_image``)."""
    image = part.get("image_url")
    detail = part.get("detail")
    url = image
    if isinstance(image, Mapping):
        detail = image.get("detail", detail)
        url = image.get("url")
    if detail == "low":
        return LOW_DETAIL_TOKENS
    size = _data_url_size(url) if isinstance(url, str) else None
    if size is None or min(size) <= 0:
        return MAX_IMAGE_TOKENS
    return LOW_DETAIL_TOKENS + TILE_TOKENS * _tiles(*size)
