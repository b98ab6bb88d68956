"""ResentBodies parses exactly what orjson parses, and reuses the previous parse only when the
bytes prove the new body extends the old one."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from proxy.jsonio import loads_exact, structure
from proxy.services.resent import ResentBodies

KEY = ("tenant", "session")


def _history(n: int, size: int = 300) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are terse. " + "x" * size}]
    for i in range(n):
        out.append({"role": "user", "content": f'question {i} é "quoted" ] }} ' + "y" * size})
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": "[1, 2]" * 50})
    return out


def _dump(body: dict[str, Any], style: str) -> bytes:
    if style == "sdk":  # httpx/json.dumps defaults: spaces after separators
        return json.dumps(body).encode()
    if style == "pretty":
        return json.dumps(body, indent=2).encode()
    return orjson.dumps(body)


@pytest.mark.parametrize("style", ["sdk", "compact", "pretty"])
@pytest.mark.parametrize("first", ["messages", "model"])
def test_an_extended_history_reuses_the_previous_messages(style: str, first: str) -> None:
    cache = ResentBodies(min_bytes=0)
    tail = {
        "tools": [
            {
                "type": "function",
                "function": {"name": "f", "parameters": {"type": "object", "required": ["a"]}},
            }
        ],
        "stop": ["]"],
        "max_tokens": 5,
    }
    history = _history(10)

    def body(msgs: list[dict[str, Any]]) -> bytes:
        ordered = (
            {"messages": msgs, "model": "m"}
            if first == "messages"
            else {"model": "m", "messages": msgs}
        )
        return _dump({**ordered, **tail}, style)

    one = cache.parse(KEY, body(history))
    history += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "more"}]
    raw = body(history)
    two = cache.parse(KEY, raw)
    assert two == orjson.loads(raw)
    assert list(two) == list(orjson.loads(raw))  # key order kept
    assert two["messages"][0] is one["messages"][0]  # parsed once, shared
    assert two["messages"] is not one["messages"] and two is not one
    raw = body(history)  # the same body again (a retry): still the fast path
    three = cache.parse(KEY, raw)
    assert three == two and three["messages"][-1] is two["messages"][-1]


def test_edits_and_new_tails_are_parsed_in_full() -> None:
    cache = ResentBodies(min_bytes=0)
    history = _history(5)
    first = cache.parse(KEY, orjson.dumps({"model": "m", "messages": history}))
    edited = [dict(history[0], content="changed"), *history[1:], {"role": "user", "content": "q"}]
    raw = orjson.dumps({"model": "m", "messages": edited})
    second = cache.parse(KEY, raw)
    assert second == orjson.loads(raw) and second["messages"][1] is not first["messages"][1]
    raw = orjson.dumps({"model": "m", "messages": edited, "max_tokens": 9})
    third = cache.parse(KEY, raw)
    assert third == orjson.loads(raw) and third["messages"][1] is not second["messages"][1]


def test_invalid_json_in_the_new_part_is_still_an_error() -> None:
    cache = ResentBodies(min_bytes=0)
    raw = orjson.dumps({"model": "m", "messages": _history(3), "n": 1})
    cache.parse(KEY, raw)
    end = raw.rindex(b"]")
    for splice in (b".5", b"e5", b",", b",}", b', {"a": 1}, ', b"] , [", b'"x"'):
        bad = raw[:end] + splice + raw[end:]
        with pytest.raises(ValueError):
            orjson.loads(bad)
        with pytest.raises(ValueError):
            cache.parse(KEY, bad)


def test_a_resent_lone_half_in_the_new_part_reads_as_the_stored_reply() -> None:
    """A reply that ended with a character's first half, resent after a cached body: read as
    the stored reply holds it (U+FFFD), not refused."""
    cache = ResentBodies(min_bytes=0)
    history = _history(3)
    cache.parse(KEY, json.dumps({"model": "m", "messages": history}).encode())
    history += [{"role": "assistant", "content": "cut \ud83d"}, {"role": "user", "content": "go"}]
    body = cache.parse(KEY, json.dumps({"model": "m", "messages": history}).encode())
    assert body["messages"][-2] == {"role": "assistant", "content": "cut \ufffd"}


def test_a_nested_messages_key_is_not_taken_for_the_history() -> None:
    cache = ResentBodies(min_bytes=0)
    meta = {"metadata": {"messages": [{"role": "user", "content": "decoy"}]}}
    raw = orjson.dumps({**meta, "messages": _history(3)})
    first = cache.parse(KEY, raw)
    raw = orjson.dumps({**meta, "messages": [*_history(3), {"role": "user", "content": "n"}]})
    second = cache.parse(KEY, raw)
    assert second == orjson.loads(raw) and second["messages"][0] is first["messages"][0]
    assert second["metadata"] == meta["metadata"]


def test_unnamed_small_and_duplicate_key_bodies_are_not_cached() -> None:
    cache = ResentBodies(min_bytes=1000)
    small = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert cache.parse(KEY, small) is not cache.parse(KEY, small)
    raw = orjson.dumps({"model": "m", "messages": _history(3)})
    assert cache.parse(None, raw)["messages"][0] is not cache.parse(None, raw)["messages"][0]
    # A later duplicate "messages" key wins in orjson: its layout is never cached.
    dup = raw[:-1] + b',"messages":[{"role":"user","content":"last"}]}'
    assert cache.parse(KEY, dup) == orjson.loads(dup) == cache.parse(KEY, dup)
    assert cache.parse(KEY, dup)["messages"] == [{"role": "user", "content": "last"}]


def test_the_cache_is_bounded_by_the_bytes_it_holds() -> None:
    raw = orjson.dumps({"model": "m", "messages": _history(3)})
    cache = ResentBodies(min_bytes=0, max_bytes=2 * len(raw) + 10, max_values=10**9)
    firsts = [cache.parse(("t", str(i)), raw)["messages"][0] for i in range(3)]
    assert cache.parse(("t", "2"), raw)["messages"][0] is firsts[2]
    assert cache.parse(("t", "1"), raw)["messages"][0] is firsts[1]
    assert cache.parse(("t", "0"), raw)["messages"][0] is not firsts[0]  # dropped for room


def test_the_cache_is_bounded_by_the_commas_and_brackets_it_holds() -> None:
    """Parsed, a body of tiny items holds many times its bytes, and a cached one stays
    held: the bodies are bounded by their commas and brackets too, counted anew for what
    an extended body adds."""
    tiny = orjson.dumps({"model": "m", "messages": [{"role": "user", "c": [0] * 20}] * 100})
    held = structure(tiny)
    cache = ResentBodies(min_bytes=0, max_bytes=100 * len(tiny), max_values=held * 5 // 2)
    firsts = [cache.parse(("t", str(i)), tiny)["messages"][0] for i in range(3)]
    assert cache.parse(("t", "2"), tiny)["messages"][0] is firsts[2]
    assert cache.parse(("t", "1"), tiny)["messages"][0] is firsts[1]
    assert cache.parse(("t", "0"), tiny)["messages"][0] is not firsts[0]  # dropped for room
    grown = orjson.dumps({"model": "m", "messages": [{"role": "user", "c": [0] * 20}] * 160})
    assert (
        cache.parse(("t", "0"), grown)["messages"][0]
        is cache.parse(("t", "0"), grown)["messages"][0]
    )  # extended, and kept: 1.6 bodies' worth
    assert cache.parse(("t", "1"), tiny)["messages"][0] is not firsts[1]  # dropped for it
    alone = ResentBodies(min_bytes=0, max_values=held - 1)  # one body past it: never held
    assert alone.parse(KEY, tiny)["messages"][0] is not alone.parse(KEY, tiny)["messages"][0]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
_SNIPPETS = [
    b",",
    b" ",
    b"]",
    b"}",
    b"[",
    b"{",
    b'"',
    b"\\",
    b"null",
    b",{}",
    b", 1",
    b":",
    b'"messages":[',
    b',"messages":[]',
    b"\n",
    b"]}",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_JSON, min_size=1, max_size=4),
    st.dictionaries(st.text(max_size=4), _JSON, max_size=3),
    st.integers(0, 10_000),
    st.sampled_from(["sdk", "compact"]),
)
def test_random_edits_parse_exactly_as_a_full_parse(
    items: list[Any], tail: dict[str, Any], seed: int, style: str
) -> None:
    cache = ResentBodies(min_bytes=0)
    rng = random.Random(seed)
    raw = _dump({"model": "m", "messages": items, **tail}, style)
    for _ in range(6):
        try:  # the full parse the cache stands for (a cut escape's lone half: U+FFFD)
            expected: Any = loads_exact(raw)
        except ValueError:
            expected = ValueError
        try:
            got: Any = cache.parse(KEY, raw)
        except ValueError:
            got = ValueError
        assert got == expected
        entry = cache._entries.get(KEY)
        at_end = entry is not None and rng.random() < 0.7  # where a client would splice
        pos = entry.end if at_end else rng.randrange(len(raw) + 1)
        snippet = (
            rng.choice(_SNIPPETS) if rng.random() < 0.6 else b", " + orjson.dumps(rng.choice(items))
        )
        raw = raw[:pos] + snippet + raw[pos:]
