"""Image parts are priced by OpenAI's tile rule where their size is known, else at the most."""

from __future__ import annotations

import base64
import struct

import pytest

from proxy.cascade.images import MAX_IMAGE_TOKENS, image_size, image_tokens
from proxy.cascade.tokens import REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE, estimate_tokens


def _png(w: int, h: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", w, h)


def _jpeg(w: int, h: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    sof = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, h, w) + b"\x03" + b"\x00" * 9
    return b"\xff\xd8" + app0 + sof


def _gif(w: int, h: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", w, h)


def _webp(w: int, h: int) -> bytes:
    body = b"VP8X" + b"\x00" * 8 + (w - 1).to_bytes(3, "little") + (h - 1).to_bytes(3, "little")
    return b"RIFF" + b"\x00" * 4 + b"WEBP" + body


def _part(data: bytes, mime: str = "image/png", detail: str | None = None) -> dict:
    url = f"data:{mime};base64," + base64.b64encode(data + b"\x00" * 32).decode()
    image = {"url": url} | ({"detail": detail} if detail else {})
    return {"type": "image_url", "image_url": image}


@pytest.mark.parametrize("make", [_png, _jpeg, _gif, _webp])
def test_the_size_is_read_from_the_header(make: object) -> None:
    assert image_size(make(1920, 1080)) == (1920, 1080)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("w", "h", "tokens"),
    [
        (512, 512, 85 + 170),  # one tile
        (1024, 1024, 85 + 170 * 4),  # short side to 768: 2 x 2 tiles
        (1920, 1080, 85 + 170 * 6),  # 1365 x 768: 3 x 2 tiles
        (768, 2048, 85 + 170 * 8),  # the most tiles any image gets
        (4096, 8192, 85 + 170 * 6),  # first into 2048 x 2048: 1024 x 2048, then 768 x 1536
    ],
)
def test_high_detail_costs_its_tiles(w: int, h: int, tokens: int) -> None:
    assert image_tokens(_part(_png(w, h))) == tokens
    assert image_tokens(_part(_png(w, h), detail="high")) == tokens


def test_low_detail_is_flat() -> None:
    assert image_tokens(_part(_png(768, 2048), detail="low")) == 85


def test_an_image_of_unknown_size_costs_the_most() -> None:
    assert MAX_IMAGE_TOKENS == 85 + 170 * 8
    remote = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    assert image_tokens(remote) == MAX_IMAGE_TOKENS
    assert image_tokens(_part(b"not an image")) == MAX_IMAGE_TOKENS
    broken = {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@@"}}
    assert image_tokens(broken) == MAX_IMAGE_TOKENS


def test_a_tall_screenshot_counts_its_tiles_in_the_estimate() -> None:
    msg = {"role": "user", "content": [{"type": "text", "text": ""}, _part(_png(768, 2048))]}
    assert estimate_tokens([msg]) == REPLY_PRIMING_TOKENS + TOKENS_PER_MESSAGE + 85 + 170 * 8
