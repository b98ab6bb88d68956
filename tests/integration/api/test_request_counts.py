"""A chat body's counts and its size in JSON values, through the real proxy.

The proxy reads ``max_tokens`` and ``max_completion_tokens`` (the output its window budget
reserves) and ``n`` (several choices: no ``read_tool_output``). Given as a string, a
boolean or a fraction, each was forwarded as it came while the proxy read it as no count (a
string, a float) or as 1 (``true``): a lenient provider that takes ``"100"`` then answered
under another budget than the proxy's. Such a count, or one below 1, is now the client's
400 naming it. A whole float (``100.0``) is an integer to JSON Schema, which OpenAI's
reference is written in: it is read as its value and forwarded as it came. Fields the proxy
does not read go to the provider as they came, whatever their type.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.errors_helpers import _assert_error_shape

BAD_COUNTS = {
    "max_tokens_string": ("max_tokens", "100", "got a string"),
    "max_tokens_true": ("max_tokens", True, "got true"),
    "max_tokens_fraction": ("max_tokens", 100.5, "got 100.5"),
    "max_tokens_negative": ("max_tokens", -5, "got -5"),
    "max_tokens_zero": ("max_tokens", 0, "got 0"),
    "max_tokens_long": ("max_tokens", -(10**50), "got -1" + "0" * 37 + "…"),
    "max_completion_tokens_string": ("max_completion_tokens", "100", "got a string"),
    "max_completion_tokens_array": ("max_completion_tokens", [100], "got an array"),
    "n_string": ("n", "2", "got a string"),
    "n_fraction": ("n", 1.5, "got 1.5"),
    "n_whole_zero": ("n", 0.0, "got 0.0"),
    "n_false": ("n", False, "got false"),
    "n_zero": ("n", 0, "got 0"),
}


def _post(http: httpx.Client, sid: str, **extra: Any) -> httpx.Response:
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}], **extra}
    return http.post("/v1/chat/completions", json=body, headers={"x-session-id": sid})


def test_a_count_the_proxy_reads_of_another_type_is_a_400_naming_it(
    http: httpx.Client, client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    for case, (name, value, said) in BAD_COUNTS.items():
        err = _assert_error_shape(_post(http, "counts", **{name: value}), 400)
        assert err["param"] == name, case
        # OpenAI's codes: a count below 1 is integer_below_min_value, another type invalid_type
        whole = type(value) is int or (type(value) is float and value.is_integer())
        code = "integer_below_min_value" if whole else "invalid_type"
        assert err["type"] == "invalid_request_error" and err["code"] == code, case
        assert f"'{name}' must be an integer of at least 1 ({said})" == err["message"], case
    for extra in ({"n": "2"}, {"max_tokens": "100"}):  # as the SDK sends what a caller adds
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(
                model="gpt-fake", messages=[{"role": "user", "content": "hi"}], extra_body=extra
            )
        assert raised.value.param == next(iter(extra))
    assert fake_upstream.requests == []
    fake_upstream.script(reply("fine"), reply("fine"))
    counts = {"max_tokens": 100, "max_completion_tokens": None, "n": 1}
    assert _post(http, "counts", **counts).status_code == 200
    answer = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "hi"}], max_tokens=50, n=1
    )
    assert answer.choices[0].message.content == "fine"
    assert fake_upstream.bodies()[0]["max_tokens"] == 100
    assert fake_upstream.bodies()[1]["max_tokens"] == 50


def test_a_whole_float_count_is_read_as_its_value_and_forwarded_as_sent(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """JSON Schema's ``integer`` holds ``100.0`` (json-schema.org, "Numeric types"), and
    OpenAI's reference types the counts so; a Python client that computes one writes it so."""
    fake_upstream.script(reply("fine"))
    counts = {"max_tokens": 100.0, "max_completion_tokens": 1e3, "n": 1.0}
    assert _post(http, "whole", **counts).status_code == 200
    sent = fake_upstream.bodies()[-1]
    assert {name: sent[name] for name in counts} == counts
    assert all(type(sent[name]) is float for name in counts)
    # read as its value: an output that fills the window is the proxy's own 400, not sent
    err = _assert_error_shape(_post(http, "whole", max_tokens=1e9), 400)
    assert err["code"] == "context_length_exceeded"
    assert len(fake_upstream.requests) == 1


def test_fields_the_proxy_does_not_read_go_upstream_as_they_came(
    http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    """The provider judges those: a lenient one takes ``"0.5"``, a strict one answers its
    own 400, which goes back to the client as it came."""
    loose = {
        "temperature": "0.5",
        "top_p": "1",
        "frequency_penalty": True,
        "seed": 1.5,
        "metadata": "x",
        "response_format": "json",
        "logit_bias": [1],
    }
    fake_upstream.script(reply("fine"))
    assert _post(http, "loose", **loose).status_code == 200
    sent = fake_upstream.bodies()[-1]
    assert {name: sent[name] for name in loose} == loose
