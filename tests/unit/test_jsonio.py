"""``jsonio.loads_exact``: a client's body keeps an integer beyond 64 bits exact wherever it
sits beside ``messages``, and a body without one is orjson's own parse."""

from __future__ import annotations

import json

import pytest

from proxy.jsonio import loads_exact

WIDE = 2**64 + 1


@pytest.mark.parametrize(
    "field",
    [
        {"response_format": {"json_schema": {"schema": {"maximum": WIDE}}}},
        {"tools": [{"function": {"parameters": {"properties": {"n": {"enum": [1, -WIDE]}}}}}]},
        {"seed": 2**63},
    ],
)
def test_an_integer_beyond_64_bits_is_read_exact(field: dict[str, object]) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **field}
    parsed = loads_exact(json.dumps(body).encode())
    assert parsed == body
    assert json.dumps(parsed) == json.dumps(body)  # ints, not floats equal to them


def test_an_exponent_in_a_string_or_a_narrow_float_changes_nothing() -> None:
    body = {"model": "m", "messages": [], "temperature": 1e15, "user": "a e+ b", "x": 1e300}
    parsed = loads_exact(json.dumps(body).encode())
    assert parsed == body
    assert isinstance(parsed["x"], float)
