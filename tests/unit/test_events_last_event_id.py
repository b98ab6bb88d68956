"""The id a stream starts after (``Last-Event-ID``, else ``?last_event_id=``): a plain
decimal number up to the largest event id, or a resume token a stream sent; anything else
is the client's 400, whatever its length, never the server's 500."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from starlette.requests import Request

from proxy.api import events, last_event_id
from proxy.api.deps import BIGINT_MAX
from proxy.api.event_cursor import TOKEN_IDS, Cursor
from proxy.api.last_event_id import TOKEN_CHARS
from proxy.errors import ClientRequestError


def _request(header: str | None = None, query: str = "") -> Request:
    headers = [] if header is None else [(b"last-event-id", header.encode())]
    return Request({"type": "http", "headers": headers, "query_string": query.encode()})


@pytest.mark.parametrize("digits", [20, 4301, 10_000])
def test_an_id_of_any_length_past_the_largest_is_the_clients_400(digits: int) -> None:
    # Regression: past 4300 digits int() raised ValueError (Python's limit on converting a
    # string to an int), which answered the request with a 500.
    for request, param in (
        (_request("9" * digits), "Last-Event-ID"),
        (_request(query=f"last_event_id={'9' * digits}"), "last_event_id"),
    ):
        with pytest.raises(ClientRequestError, match="past any event id") as refused:
            events._after(request)
        assert refused.value.param == param


def test_leading_zeros_still_name_the_id() -> None:
    assert events._after(_request("0" * 5000 + "42")) == (42, frozenset())
    assert events._after(_request("0" * 5000)) == (0, frozenset())


def test_a_resume_token_names_its_mark_and_the_ids_above_it_the_client_has() -> None:
    assert events._after(_request("40.2.5")) == (40, frozenset({42, 45}))
    assert events._after(_request(query="last_event_id=40.2")) == (40, frozenset({42}))


@pytest.mark.parametrize("value", ["40.", ".2", "40..2", "40.0", "40.-2", "4 0.2", "40.2e3"])
def test_a_mangled_resume_token_is_the_clients_400(value: str) -> None:
    with pytest.raises(ClientRequestError):
        events._after(_request(value))


def test_a_resume_token_lists_no_more_ids_than_a_stream_sends() -> None:
    most = "40" + ".1" * TOKEN_IDS  # as many as Cursor.token lists, repeated or not
    assert events._after(_request(most)) == (40, frozenset({41}))
    with pytest.raises(ClientRequestError, match="not a resume token"):
        events._after(_request(most + ".2"))


@pytest.mark.parametrize("value", ["abc", "40.", "40.2e3"])
def test_the_400_names_both_forms_a_stream_starts_after(value: str) -> None:
    """A client that mangled a resume token is told tokens are taken, not that only a
    number is."""
    with pytest.raises(ClientRequestError, match="is not an event id") as refused:
        events._after(_request(value))
    said = str(refused.value)
    assert "id of the last event received (digits)" in said
    assert "resume token" in said and "joined by dots" in said


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        ("", True),
        ("42", True),
        ("40.2.5", True),
        (".2", False),
        ("40.", False),
        ("40..2", False),
        ("4 0.2", False),
        ("40.-2", False),
    ],
)
def test_the_documented_pattern_takes_the_shapes_the_stream_takes(value: str, taken: bool) -> None:
    """A client generated from the OpenAPI document sends what the stream takes: the
    parameter's pattern refuses a token with no mark (``.2``), as the stream does."""
    pattern = last_event_id.LAST_EVENT_ID["schema"]["pattern"]
    assert (re.fullmatch(pattern, value) is not None) == taken
    if taken:
        events._after(_request(value))
    else:
        with pytest.raises(ClientRequestError):
            events._after(_request(value))


@pytest.mark.parametrize(
    ("mark", "low"), [(0, 4_000_000_000), (0, BIGINT_MAX - 200), (3_999_999_990, 4_000_000_000)]
)
def test_a_token_a_stream_sends_past_many_ids_is_taken_back_whatever_their_size(
    mark: int, low: int
) -> None:
    """Ids are one sequence over every session, so a busy proxy's are 10 digits and more: a
    stream that sent more than ``TOKEN_IDS`` above its mark (0 for one opened with no id,
    its events not settled yet), one unsent below them, lists the lowest 64, each up to a
    bigint's 19 digits past the mark, and that token is under ``TOKEN_CHARS`` and parsed."""
    cursor = Cursor(mark, datetime.now(UTC), lambda agent: True)
    sent = [low + 2, *range(low + 4, low + 4 + 2 * TOKEN_IDS)]  # low + 3 may yet commit
    for i in sent:
        cursor.take(i)
    token = cursor.token()
    assert token is not None and len(token) <= TOKEN_CHARS
    assert events._after(_request(token)) == (mark, frozenset(sent[:TOKEN_IDS]))
