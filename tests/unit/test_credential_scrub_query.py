"""A credential a provider call sent in its query string (a client's ``?key=`` passed on, as
a gateway that takes its key there has it) is scrubbed from the provider's error as the
``Authorization`` is: a compaction's failed attempt logs the head of the fast model's error,
and a gateway quoting the URL it was called at (``invalid key in …?key=…``) put the key in
the log and the ``context.compaction.failed`` event. Other parameters (``api-version``) are
words an error means, and stay."""

from __future__ import annotations

import httpx

from proxy.answers import Answer, scrubbed
from proxy.cascade.redaction import REDACTED
from proxy.services.fastmodel import read_fast_answer

KEY = "gw-query-key-0123456789"


def _request() -> httpx.Request:
    return httpx.Request(
        "POST",
        "http://gw.test/v1/chat/completions",
        params={"api-version": "2024-10-21", "key": KEY},
    )


def test_an_error_quoting_a_key_sent_in_the_query_is_scrubbed_of_it() -> None:
    request = _request()
    body = f"invalid key for {request.url} (api-version 2024-10-21)".encode()
    out = scrubbed(401, body, request).decode()
    assert KEY not in out
    assert REDACTED in out and "api-version 2024-10-21" in out


def test_the_fast_models_error_head_is_scrubbed_of_a_query_key() -> None:
    request = _request()
    body = scrubbed(403, f'{{"error": {{"message": "key {KEY} refused"}}}}'.encode(), request)
    status, head = read_fast_answer(None, Answer(403, httpx.Headers(), body, request))
    assert status == 403 and KEY not in head and REDACTED in head


def test_an_azure_functions_key_sent_as_code_is_scrubbed() -> None:
    """A gateway hosted on Azure Functions takes its function key in ``?code=``: a name that
    says nothing of a key, but whose value is one. A parameter that merely ends so
    (``country_code``) is a word an error means, and stays."""
    request = httpx.Request(
        "POST",
        "http://gw.test/api/v1/chat/completions",
        params={"code": KEY, "country_code": "de-DE-1"},
    )
    out = scrubbed(401, f"no access for {request.url} (de-DE-1)".encode(), request).decode()
    assert KEY not in out and REDACTED in out
    assert "(de-DE-1)" in out
