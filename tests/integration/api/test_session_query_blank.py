"""An empty query value (``?offset=``) is the parameter unset, as an empty ``CASCADE_*``
variable is: a form or a script that fills a template (``?offset=$NEXT&limit=``) sends the
name with nothing after it, and the README's own ``tool-outputs/…?offset=&limit=&grep=``
reads that way. A value that is there and wrong is still the 400 naming it."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.api.sessions_helpers import (
    chat,
    config_path,  # noqa: F401  (the module's config)
    settled,
    tool_history,
)

BLANK = [
    ("/v1/sessions?offset=&limit=", "/v1/sessions"),
    ("/v1/sessions/s/messages?offset=&limit=", "/v1/sessions/s/messages"),
    (
        "/v1/sessions/s/messages?form=&include_superseded=",
        "/v1/sessions/s/messages",
    ),
    (
        "/v1/sessions/s/tool-outputs/call_ls?offset=&limit=&grep=",
        "/v1/sessions/s/tool-outputs/call_ls",
    ),
    ("/v1/memory/suggestions?limit=", "/v1/memory/suggestions"),
    ("/v1/memory?scope=", "/v1/memory"),
    ("/v1/memory?limit=&offset=", "/v1/memory"),
]


@pytest.mark.parametrize(("blank", "unset"), BLANK, ids=[c[0] for c in BLANK])
def test_an_empty_query_value_is_the_parameter_unset(
    http: httpx.Client, blank: str, unset: str
) -> None:
    chat(http, tool_history(), sid="s")
    settled(http, "s", 4)
    got, want = http.get(blank), http.get(unset)
    assert got.status_code == 200, got.text
    assert got.json() == want.json()


@pytest.mark.parametrize("value", [" ", "abc", "-1"])
def test_a_present_bad_value_is_still_a_400(http: httpx.Client, value: str) -> None:
    resp = http.get("/v1/sessions", params={"offset": value})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "offset"


NOT_INTEGERS = ["1.0", "1e3", "+5", " 5", "0x10", "5_0", "٥"]
INTEGER_PARAMS = [
    ("/v1/sessions", "limit"),
    ("/v1/sessions", "offset"),
    ("/v1/sessions/s/messages", "limit"),
    ("/v1/sessions/s/messages", "offset"),
    ("/v1/sessions/s/tool-outputs/call_ls", "offset"),
    ("/v1/sessions/s/tool-outputs/call_ls", "limit"),
    ("/v1/memory/suggestions", "limit"),
    ("/v1/memory/suggestions", "offset"),
    ("/v1/memory", "limit"),
    ("/v1/memory", "offset"),
]


@pytest.mark.parametrize("value", NOT_INTEGERS)
def test_an_integer_parameter_takes_decimal_digits_only(http: httpx.Client, value: str) -> None:
    """``?limit=1.0`` was read as 1 (and ``+5``, `` 5``, ``5_0`` as integers too): what is
    not written as an integer is the 400 naming the parameter, on every route."""
    for path, param in INTEGER_PARAMS:
        resp = http.get(path, params={param: value})
        assert resp.status_code == 400, (path, param, resp.text)
        error = resp.json()["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", param), error
        assert error["message"] == (
            f"query.{param}: Input should be a valid integer, unable to parse string as an integer"
        )
    resp = http.delete(f"/v1/memory/{value}")  # a path parameter too
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "fact_id"


def test_digits_are_still_an_integer(http: httpx.Client) -> None:
    resp = http.get("/v1/sessions", params={"limit": "07", "offset": "0"})
    assert resp.status_code == 200, resp.text
