"""A chat body extending the session's last one has its JSON values counted only where it
adds to it (``ResentBodies.counted``): a long history whose texts hold many commas and
brackets (tool results that are JSON) was counted whole again on every request, many
times what parsing only its new messages costs."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from starlette.requests import Request

from proxy.api import deps
from proxy.errors import PayloadTooLarge
from proxy.jsonio import values_in
from proxy.services.resent import ResentBodies

KEY = ("t", "s")
LIMIT = 1_000


def _request(raw: bytes) -> Request:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    return Request({"type": "http", "method": "POST", "headers": [], "path": "/"}, receive)


def _body(messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"model": "m", "messages": messages, "tools": [{"a": [1, {}]}]})


def _tool(i: int) -> dict[str, Any]:  # a result that is JSON text: commas and brackets
    return {"role": "tool", "tool_call_id": f"c{i}", "content": orjson.dumps([[i]] * 30).decode()}


def test_a_body_that_extends_the_last_is_counted_where_it_adds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    whole: list[int] = []
    count = deps.values_count
    monkeypatch.setattr(
        deps, "values_count", lambda raw, limit: whole.append(1) or count(raw, limit)
    )
    cache = ResentBodies(min_bytes=0)

    def read(raw: bytes) -> dict[str, Any]:
        request = _request(raw)
        return asyncio.run(
            deps.read_json_body(request, 1 << 24, resent=cache, key=KEY, values=LIMIT)
        )

    history = [{"role": "user", "content": "go"}] + [_tool(i) for i in range(60)]
    assert orjson.dumps(history).count(b",") > LIMIT  # past the count that reads no string
    assert len(read(_body(history))["messages"]) == 61
    assert whole == [1]
    for i in range(60, 64):
        history.append(_tool(i))
        assert len(read(_body(history))["messages"]) == len(history)
    assert whole == [1]  # each counted as the last one's values and its new message's
    assert cache.counted(KEY, _body(history)) is not None

    # what is added is counted all the same: tiny items past the limit are the 413 (a sum
    # past it is counted whole, since the last body's count may be a bound above its own)
    with pytest.raises(PayloadTooLarge):
        read(_body([*history, {"role": "user", "content": "x", "x": [[]] * LIMIT}]))
    assert whole == [1, 1]
    # another history is counted whole
    read(_body(history[:-1] + [{"role": "user", "content": "edited"}]))
    assert whole == [1, 1, 1]


def test_the_count_of_an_extended_body_is_its_own() -> None:
    cache = ResentBodies(min_bytes=0)
    history = [{"role": "user", "content": "a,[b]{c}"}, {"role": "assistant", "content": "d"}]
    raw = _body(history)
    assert cache.counted(KEY, raw) is None  # nothing cached
    cache.parse(KEY, raw)
    assert cache.counted(KEY, raw) is None  # cached without a count
    cache.parse(KEY, raw, 14)  # its values, as jsonio.values_count counts them
    extended = _body([*history, {"role": "user", "content": '"[x],', "n": [1, [], {"k": 2}]}])
    assert cache.counted(KEY, extended) == 14 + 8  # the message, 2 strings, n and its 4 values
    assert cache.counted(KEY, _body(history[:1])) is None  # not an extension


def test_new_bytes_that_end_in_a_string_are_counted_whole() -> None:
    """Spliced before a tail that holds a string of brackets, new bytes that open a string
    read the tail's string as JSON: the sum would miss its values."""
    cache = ResentBodies(min_bytes=0)
    history = [{"role": "user", "content": "a"}]
    raw = orjson.dumps({"messages": history, "x": "[[],[],[]]"})
    cache.parse(KEY, raw, 9)
    end = raw.index(b"]")  # just after the last message
    assert cache.counted(KEY, raw[:end] + b',"z' + raw[end:]) is None
    assert cache.counted(KEY, raw[:end] + b',"z"' + raw[end:]) == 10


def test_new_items_are_counted_with_their_escapes_blanked() -> None:
    assert values_in(b',"a\\\\",[1,{}]') == 4  # an escaped backslash ends no string
    assert values_in(b',"a\\",[1,{}]"') == 1  # an escaped quote does not either


def test_a_body_no_longer_than_the_limit_is_not_compared_with_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its length is its count: every request of an ordinary session pays nothing more."""
    cache = ResentBodies(min_bytes=0)
    compared: list[bytes] = []
    monkeypatch.setattr(cache, "counted", lambda key, raw: compared.append(raw))
    raw = _body([{"role": "user", "content": "hi"}])
    for _ in range(2):
        request = _request(raw)
        asyncio.run(deps.read_json_body(request, 1 << 20, resent=cache, key=KEY, values=len(raw)))
    assert compared == []
