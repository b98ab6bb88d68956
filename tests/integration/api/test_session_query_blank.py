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
