"""``Answer.usage``: an answer's ``usage`` read from its tail, without parsing the vectors of an
embeddings answer before it; whatever is not a readable ``usage`` is None."""

from __future__ import annotations

import httpx
import pytest

from proxy.upstream import Answer


def _answer(body: bytes) -> Answer:
    return Answer(200, httpx.Headers(), body)


@pytest.mark.parametrize(
    ("body", "usage"),
    [
        (b'{"data":[{"embedding":[0.1,0.2]}],"usage":{"prompt_tokens":8,"total_tokens":8}}',
         {"prompt_tokens": 8, "total_tokens": 8}),
        # spaced out, usage first, details nested in it
        (b'{ "usage" : {"prompt_tokens": 3, "details": {"cached": 1}}, "data": [] }',
         {"prompt_tokens": 3, "details": {"cached": 1}}),
        (b'{"data":[],"usage":null}', None),
        (b'{"data":[]}', None),
        (b'{"data":[],"usage":{"prompt_tokens":', None),  # cut off
        (b'{"data":[],"usage"}', None),
        (b"<html>usage</html>", None),
    ],
)  # fmt: skip
def test_the_usage_of_an_answer(body: bytes, usage: object) -> None:
    assert _answer(body).usage() == usage


def test_a_usage_nested_past_the_recursion_limit_is_none() -> None:
    """A provider's ``usage`` nested past what ``json`` recursion allows is no readable
    usage: the embeddings answer is relayed as it came, not a 500 from the RecursionError."""
    deep = b"[" * 100_000 + b"]" * 100_000
    assert _answer(b'{"data":[],"usage":' + deep + b"}").usage() is None
