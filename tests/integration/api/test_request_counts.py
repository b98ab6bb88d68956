"""A chat body's counts and its size in JSON values, through the real proxy.

The proxy reads ``max_tokens`` and ``max_completion_tokens`` (the output its window budget
reserves) and ``n`` (several choices: no ``read_tool_output``). Given as a string, a
boolean or a float, each was forwarded as it came while the proxy read it as no count (a
string, a float) or as 1 (``true``): a lenient provider that takes ``"100"`` then answered
under another budget than the proxy's. Such a count, or one below 1, is now the client's
400 naming it. Fields the proxy does not read go to the provider as they came, whatever
their type.
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
    "max_tokens_float": ("max_tokens", 100.0, "got 100.0"),
    "max_tokens_negative": ("max_tokens", -5, "got -5"),
    "max_tokens_zero": ("max_tokens", 0, "got 0"),
    "max_tokens_long": ("max_tokens", -(10**50), "got -1" + "0" * 37 + "…"),
    "max_completion_tokens_string": ("max_completion_tokens", "100", "got a string"),
    "max_completion_tokens_array": ("max_completion_tokens", [100], "got an array"),
    "n_string": ("n", "2", "got a string"),
    "n_float": ("n", 2.0, "got 2.0"),
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
        code = "integer_below_min_value" if type(value) is int else "invalid_type"
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
