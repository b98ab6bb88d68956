"""The estimate without a BPE encoder: chars/4 for prose and code, not far under for dense text."""

from __future__ import annotations

import base64
import json
import math
import random
import re
import uuid
from pathlib import Path

import bpe_openai
import pytest
from hypothesis import given, settings, strategies as st

from proxy.cascade import estimate, overflow
from proxy.cascade.estimate import text_tokens

_ENC = bpe_openai.get_encoding("o200k_base")
_RND = random.Random(7)


def _real(text: str) -> int:
    return len(_ENC.encode(text))


DENSE = {
    "chinese": "这是一个测试文本，用于检查分词器的行为。我们需要更多的中文字符来进行测试。" * 40,
    "japanese": "これはトークナイザーのテストです。日本語の文章を多く含みます。" * 40,
    "korean": "이것은 토크나이저 테스트입니다. 한국어 문장을 많이 포함합니다. " * 40,
    "hindi": "यह टोकनाइज़र का परीक्षण है। हिंदी पाठ में कई शब्द हैं। " * 40,
    "thai": "นี่คือการทดสอบตัวแบ่งคำ ข้อความภาษาไทยมีคำมากมาย " * 40,
    "emoji": "".join(_RND.choice("🎉😀🚀👍🏽❤️🔥🦀🐍") for _ in range(800)),
    "base64": base64.b64encode(_RND.randbytes(3000)).decode(),
    "hex": _RND.randbytes(1500).hex(),
    "uuids": "\n".join(str(uuid.UUID(int=_RND.getrandbits(128))) for _ in range(80)),
    "call ids": " ".join(f"call_{_RND.randbytes(12).hex()}" for _ in range(80)),
}


@pytest.mark.parametrize("kind", sorted(DENSE))
def test_dense_text_is_not_counted_far_under(kind: str) -> None:
    # chars/4 said 0.16 (emoji) to 0.5 (Korean) of the real count here
    text = DENSE[kind]
    assert text_tokens(text) >= 0.95 * _real(text)


def test_digits_and_json_are_not_counted_far_under() -> None:
    digits = "".join(_RND.choice("0123456789") for _ in range(4000))
    assert text_tokens(digits) >= 0.95 * _real(digits)  # chars/4 said 0.75
    rows = [{"id": i, "name": f"item{i}", "v": _RND.random(), "ok": True} for i in range(200)]
    minified = json.dumps(rows, separators=(",", ":"))
    assert text_tokens(minified) >= 0.8 * _real(minified)  # chars/4 said 0.63


PLAIN = {
    "english": "The quick brown fox jumps over the lazy dog. " * 100,
    "russian": "Это проверка токенизатора. Русский текст содержит много слов. " * 50,
    "french": "Le texte français contient des accents é è à ç, comme prévu. " * 50,
    "code": Path(overflow.__file__).read_text(),
    "paths": "\n".join(f"/srv/app/src/module_{i}/handlers/request_parser.py" for i in range(80)),
}


@pytest.mark.parametrize("kind", sorted(PLAIN))
def test_prose_code_and_paths_are_not_counted_far_over(kind: str) -> None:
    text = PLAIN[kind]
    assert text_tokens(text) <= 1.3 * _real(text)


def test_prose_and_identifiers_count_as_chars_over_four() -> None:
    text = PLAIN["english"] + PLAIN["paths"].replace("_", "-") + " RelatedGreaterThanOrEqual"
    text = "".join(c for c in text if not c.isdigit())
    assert text_tokens(text) == -(-len(text) // 4)


def test_nothing_is_nothing() -> None:
    assert text_tokens("") == 0
    assert text_tokens("a") == 1


_ID_RUN = re.compile(r"[A-Za-z0-9+/=_\-]{16,}")
_SWITCH = re.compile(r"(?=[A-Za-z][0-9]|[0-9][A-Za-z])")


def _reference(text: str) -> int:
    """The estimate as its module docstring states it, each character classed on its own and
    each id run found by a regex: what the one-pass byte-class counting must equal (summed
    in the same order, so that float rounding agrees too)."""
    digits = sum(c in "0123456789" for c in text)
    punct = sum(c in '"{}[]:' for c in text)
    below = sum(0x800 <= ord(c) < 0x3000 for c in text)  # 3-byte, below U+3000
    upper = sum(0x3000 <= ord(c) <= 0xFFFF for c in text)  # 3-byte, from U+3000
    astral = sum(ord(c) > 0xFFFF for c in text)  # 4-byte
    total = len(text) / 4 + digits / 12 + punct / 4
    if below or upper or astral:
        total += below / 4 + upper * 0.45
        total += astral * 7 / 4
    extra = 0.0
    for run in (m.group() for m in _ID_RUN.finditer(text)):
        switches = len(_SWITCH.findall(run))
        if switches >= estimate.DENSE_SWITCHES * len(run):
            run_digits = sum(c.isdigit() for c in run)
            extra += len(run) / estimate.DENSE_CHARS_PER_TOKEN - len(run) / 4 - run_digits / 12
    return math.ceil(total + extra) if text else 0


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(alphabet='abXY0189+/=_- \n"{}[]:é中😀\ud800', max_size=120),
        st.text(alphabet="ab01-", min_size=12, max_size=24),  # runs near the 16 of a dense id
    )
)
def test_the_byte_class_counting_equals_the_stated_weights(text: str) -> None:
    assert text_tokens(text) == _reference(text)
