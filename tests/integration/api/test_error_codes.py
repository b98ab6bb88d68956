"""The proxy's own 400s for a request field carry OpenAI's code for the same refusal.

OpenAI answers a field of another type with ``invalid_type``, a count below 1 with
``integer_below_min_value``, a missing ``messages`` with ``missing_required_parameter`` and
``messages: []`` with ``empty_array``; a client keying on those codes (through the SDK's
``BadRequestError.code``) reads the proxy's refusal as OpenAI's. Where OpenAI has no code
(a body that is no JSON) it stays ``null``. Nothing goes upstream.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.errors_helpers import TURN1, _assert_error_shape

TYPE, BELOW, MISSING = "invalid_type", "integer_below_min_value", "missing_required_parameter"
CODES: dict[str, tuple[dict[str, Any], str, str]] = {
    "tools": ({"model": "gpt-fake", "messages": TURN1, "tools": 5}, "tools", TYPE),
    "messages_string": ({"model": "gpt-fake", "messages": "hi"}, "messages", TYPE),
    "message_string": ({"model": "gpt-fake", "messages": ["hi"]}, "messages[0]", TYPE),
    "role_number": ({"model": "gpt-fake", "messages": [{"role": 1}]}, "messages[0].role", TYPE),
    "n_zero": ({"model": "gpt-fake", "messages": TURN1, "n": 0}, "n", BELOW),
    "n_string": ({"model": "gpt-fake", "messages": TURN1, "n": "2"}, "n", TYPE),
    "no_messages": ({"model": "gpt-fake"}, "messages", MISSING),
    "no_role": ({"model": "gpt-fake", "messages": [{"content": "x"}]}, "messages[0].role", MISSING),
    "null_role": ({"model": "gpt-fake", "messages": [{"role": None}]}, "messages[0].role", MISSING),
    "empty_messages": ({"model": "gpt-fake", "messages": []}, "messages", "empty_array"),
}


@pytest.mark.parametrize("case", list(CODES))
def test_a_refused_chat_field_carries_openais_code(
    http: httpx.Client, fake_upstream: FakeUpstream, case: str
) -> None:
    body, param, code = CODES[case]
    resp = http.post("/v1/chat/completions", json=body, headers={"x-session-id": "codes"})
    err = _assert_error_shape(resp, 400)
    assert (err["code"], err["param"], err["type"]) == (code, param, "invalid_request_error")
    assert fake_upstream.requests == []


def test_the_sdk_reads_the_code(client: openai.OpenAI, fake_upstream: FakeUpstream) -> None:
    extra: dict[str, Any] = {"max_tokens": 0}
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": "hi"}], extra_body=extra
        )
    assert (raised.value.code, raised.value.param) == ("integer_below_min_value", "max_tokens")
    assert "'max_tokens' must be an integer of at least 1 (got 0)" in raised.value.message
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="gpt-fake", messages=[])
    assert (raised.value.code, raised.value.param) == ("empty_array", "messages")
    assert fake_upstream.requests == []


def test_a_refusal_openai_answers_without_a_code_stays_null(http: httpx.Client) -> None:
    resp = http.post(
        "/v1/chat/completions",
        content=b'{"messages": [',
        headers={"content-type": "application/json", "x-session-id": "codes"},
    )
    assert _assert_error_shape(resp, 400)["code"] is None


def test_a_branch_id_of_another_type_is_invalid_type(http: httpx.Client) -> None:
    resp = http.post("/v1/sessions/codes/branch", json={"id": 5})
    err = _assert_error_shape(resp, 400, "invalid_type")
    assert err["param"] == "id"
