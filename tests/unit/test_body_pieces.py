"""``api.body_pieces``: a large chat body parsed a piece of its ``messages`` at a time, to
what ``loads_exact`` answers, the event loop running between pieces."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from starlette.requests import Request
from starlette.responses import StreamingResponse

from proxy.api import body_pieces
from proxy.api.body_pieces import in_pieces, parsed_in_pieces
from proxy.api.deps import read_json_body
from proxy.jsonio import loads_exact
from proxy.services.resent import ResentBodies, _split

CODE = 'function f(a) { return [{x: 1}, {y: 2}]; }, {"role": "user"}'  # "}," in a string
BODIES: list[Any] = [
    {"model": "m", "messages": [{"role": "user", "content": f"m{i} {CODE}"} for i in range(40)]},
    {
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text"}]},
            {"role": "assistant", "content": "é ü 中文", "tool_calls": [{"id": "1"}, {"id": "2"}]},
            {"role": "tool", "tool_call_id": "1", "content": "ok"},
        ]
        * 10,
        "stream": True,
        "max_tokens": 100,
    },
    {"messages": [{"role": "user", "content": "one"}], "n": 1},
    {  # a nested array of objects that begin with "role": a run ending inside it is retried
        "messages": [
            {"role": "user", "content": "a", "quoted": [{"role": "x"}, {"role": "y"}] * 3},
            {"role": "user", "content": "b"},
        ]
        * 5
    },
    {"messages": ["not an object", {"role": "user", "content": "x"}, 3]},
    {  # after the messages, an array of objects that begin with "role": no run reaches it
        "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        "x": [{"role": "p"}, {"role": "q"}, {"role": "r"}],
        "y": {"role": "s", "content": [{"role": "t"}, {"role": "u"}]},
    },
]


def _forms(value: Any) -> list[bytes]:
    return [orjson.dumps(value), json.dumps(value, indent=2, ensure_ascii=True).encode()]


def _run(raw: bytes, piece: int, room: int | None = 1 << 30) -> tuple[Any, int] | None:
    """The parse, with room for tiny pieces tried many times over unless ``room`` says."""
    steps = in_pieces(raw, piece, room)
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


@pytest.mark.parametrize("value", BODIES)
@pytest.mark.parametrize("piece", [1, 40, 300, 1 << 20])
def test_a_body_in_pieces_is_the_body_parsed_whole(value: Any, piece: int) -> None:
    for raw in _forms(value):
        got = _run(raw, piece)
        assert got is not None
        assert got[0] == loads_exact(raw) == value
        assert list(got[0]) == list(value)  # its keys in the body's order
        assert got[1] == _split(raw)  # where resent's cache takes the next body from


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"role": "user"},{"role": "user"},]}',  # a trailing comma
        b'{"messages": [], "model": "m"}',
        b'{"messages": [{"role": "user"}], "messages": [{"role": "x"}]}',
        b'{"model": "m"}',
        b'{"a": {"messages": [{"role": "user"}]}}',
        b'{"messages": [{"role": "user"},{"role": "user"}]',  # never closed
        b'{"messages": [{"role": "user"},{"role": "user", }]}',
        b'["messages", {"messages": [{"role": "user"}]}]',
        # another "messages" after the array, its name escaped: the whole parse keeps it
        b'{"messages": [{"role": "a"},{"role": "b"}], "messag\\u0065s": [{"role": "c"}]}',
        # more nested "messages" keys before the top-level one than are looked for
        b'{"a": [' + b",".join([b'{"messages": [1]}'] * 5) + b'], "messages": [{"role": "a"}]}',
    ],
)
def test_a_body_not_laid_out_as_taken_is_left_to_the_whole_parse(raw: bytes) -> None:
    assert _run(raw, 1) is None


def test_a_duplicate_key_reads_as_the_whole_parse_reads_it() -> None:
    raw = b'{"model": "a", "messages": [{"role": "user"},{"role": "user"}], "model": "b"}'
    got = _run(raw, 1)
    assert got is not None and got[0] == loads_exact(raw) and list(got[0]) == ["model", "messages"]


def _big(n: int) -> bytes:
    message = {"role": "user", "content": "x" * 900 + " }, {"}
    return orjson.dumps({"model": "m", "messages": [message] * n, "stream": False})


async def test_the_loop_runs_between_the_pieces() -> None:
    raw = _big(5000)  # about 4.6 MiB: five pieces and more
    ticks = 0
    parsing = True

    async def tick() -> None:
        nonlocal ticks
        while parsing:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    got = await parsed_in_pieces(raw)
    parsing = False
    await ticker
    assert got is not None and got[0] == loads_exact(raw)
    assert ticks >= 4


async def test_a_large_chat_body_leaves_the_loop_free_as_it_is_parsed() -> None:
    """What ``read_json_body`` does once the last byte is in: parsed whole, the loop runs
    nothing else until the body is parsed; in pieces, a task beside it runs between them."""
    raw = _big(5000)
    sent, ticks_after_sent = False, 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    async def tick() -> None:
        nonlocal ticks_after_sent
        while True:
            ticks_after_sent += sent
            await asyncio.sleep(0)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    resent = ResentBodies()
    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    body = await read_json_body(Request(scope, receive), 64 << 20, resent=resent, key="k")
    ticker.cancel()
    assert body == loads_exact(raw)
    assert ticks_after_sent >= 4
    # cached as a whole parse caches it: the next body, one message more, takes the fast path
    close = raw.rindex(b"]")
    longer = raw[:close] + b',{"role":"user","content":"more"}' + raw[close:]
    assert resent.extends("k", longer)
    again = resent.parse("k", longer)
    assert again["messages"][0] is body["messages"][0] and len(again["messages"]) == 5001


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes ``body_pieces`` hands its parser, call by call."""
    fed: list[int] = []

    def loads(data: bytes) -> Any:
        fed.append(len(data))
        return orjson.loads(data)

    monkeypatch.setattr(body_pieces, "loads", loads)
    return fed


NESTED_ROLES = {  # every "}, {"role"" sits in a nested array: no run ever ends at a message
    "model": "m",
    "messages": [{"role": "user", "content": [{"role": "x", "t": "y" * 200}] * 5000}],
}
NO_RUNS = {"messages": [{"content": "x" * 200, "role": "user"}] * 5000}  # "role" not first
NESTED_KEYS = {  # "messages" keys in a large field before the top-level one
    "tools": [{"p": "z" * 300_000}, {"messages": [1]}, {"messages": [2]}, {"messages": [3]}],
    "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
}


@pytest.mark.parametrize("value", [NESTED_ROLES, NO_RUNS, NESTED_KEYS])
def test_a_body_no_run_fits_costs_at_most_one_parse_more(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body laid out so that no run parses (or one that must be parsed twice) is left to
    the whole parse once the bytes parsed for nothing pass half the body: tried ever longer,
    it was parsed several times over on the loop before its one whole parse."""
    raw = orjson.dumps(value)
    fed = _counted(monkeypatch)
    got = _run(raw, 1 << 14, None)
    if got is not None:
        assert got[0] == value
    assert sum(fed) <= len(raw) * 3 // 2 if got is not None else sum(fed) <= len(raw)


async def test_a_stream_keeps_flowing_while_a_large_body_is_parsed() -> None:
    """A streamed response (Starlette's, as the proxy relays one) sends chunks between the
    pieces: in the log of what happened, chunks sit between the body's arrival and its end
    of parse; parsed whole, none did."""
    raw = _big(5000)
    log: list[str] = []

    async def chunks() -> AsyncIterator[bytes]:
        while True:  # each chunk awaited, as an upstream read is
            await asyncio.sleep(0)
            yield b"data: {}\n\n"

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            log.append("chunk")

    gone = asyncio.Event()  # the streaming client stays until the end

    async def stream_receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def receive() -> dict[str, Any]:
        log.append("received")
        return {"type": "http.request", "body": raw, "more_body": False}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    stream = asyncio.create_task(StreamingResponse(chunks())(scope, stream_receive, send))
    while "chunk" not in log:  # the stream is flowing before the body comes in
        await asyncio.sleep(0)
    body = await read_json_body(Request(scope, receive), 64 << 20)
    log.append("parsed")
    gone.set()
    stream.cancel()
    assert body == loads_exact(raw)
    during = log[log.index("received") : log.index("parsed")]
    assert during.count("chunk") >= 4


M = b'{"role":"user","content":"a"}'
SHAPES = [
    b'{"messages":[' + M + b',{"role":"user","content":"\\ud83d\\ude00 \\u00e9"},' + M + b"]}",
    b'{"messages":[' + M + b',{"role":"user","content":"\\ud83d"},' + M + b'],"n":1}',
    b'{"messages":[' + M + b',{"role":"user","x":123456789012345678901234567890}],"n":1}',
    b'{"n":123456789012345678901234567890,"messages":[' + M + b"," + M + b"]}",
    b'{"messages":[' + M + b',{"role":"user","x":NaN}],"n":1}',
    b'{"messages":[' + M + b"," + M + b'],"n":Infinity}',
    b'{"messages":[' + M + b"," + M + b'],"n":1} x',
    b'{"messages":[' + M + b"," + M + b'],"n":1}{}',
    b'\xef\xbb\xbf{"messages":[' + M + b"," + M + b"]}",
    b'{"messages":[' + M + b"," + M + b'],"n":1}\n',
    b'{"messages":"s","x":1,"messages":[' + M + b"," + M + b"]}",
    b'{"messages":[' + M + b',{"role":"user","content":"\xff"}]}',
]


@pytest.mark.parametrize("raw", SHAPES)
@pytest.mark.parametrize("piece", [1, 30])
def test_a_body_in_pieces_answers_as_the_whole_parse_or_leaves_it_to_it(
    raw: bytes, piece: int
) -> None:
    """Escapes and surrogate pairs, wide integers, NaN, trailing bytes, a BOM, a duplicated
    key, bytes that are no UTF-8: the same object, or None and the whole parse's error."""
    got = _run(raw, piece)
    try:
        whole = loads_exact(raw)
    except ValueError:
        assert got is None
        return
    assert got is None or (got[0] == whole and list(got[0]) == list(whole))


def _cpu(work: Any) -> float:
    """The least CPU time of three calls of ``work``."""
    spent = []
    for _ in range(3):
        began = time.process_time()
        work()
        spent.append(time.process_time() - began)
    return min(spent)


TEXT = "f(x) { return {a: 1}, {b: [2, 3]}, x }, g, {h}, " * 8  # code: braces and commas
BRACED = [
    {"model": "e", "input": [TEXT] * 8000},  # no messages: the key is looked for in vain
    {"messages": [{"role": "user", "content": TEXT}] * 8000},
]


@pytest.mark.parametrize("value", BRACED)
def test_looking_for_the_key_and_the_runs_costs_less_than_a_parse(value: Any) -> None:
    """Text full of braces and commas (code, as agents send) is searched for the
    ``"messages"`` key and the runs' ends at a fraction of the parse's cost: searched with a
    pattern beginning with a byte class, each brace or comma started a try, several times
    the parse's CPU, on the loop."""
    raw = orjson.dumps(value)
    whole = _cpu(lambda: loads_exact(raw))
    pieces = _cpu(lambda: _run(raw, 1 << 16, None))
    assert pieces < 2 * whole
