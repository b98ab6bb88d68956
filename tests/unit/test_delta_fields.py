"""``proxy.cascade.delta_fields``: a provider's own fields of a stream, merged as the openai
SDK's stream helper merges them, held to a cap, and merged across a stream's rounds."""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import pytest
from openai.lib.streaming._deltas import accumulate_delta
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from proxy.cascade.delta_fields import BUILT, OwnFields, rounds_merged


def _sdk(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """The own fields of the message the SDK's stream helper builds from ``deltas``."""
    state = ChatCompletionStreamState()
    for n, delta in enumerate([*deltas, {}]):
        choice = {"index": 0, "delta": delta, "finish_reason": "stop" if n == len(deltas) else None}
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        state.handle_chunk(ChatCompletionChunk.model_validate({**chunk, "choices": [choice]}))
    message = state.get_final_completion().choices[0].message.model_dump()
    return {k: v for k, v in message.items() if k not in BUILT and k != "parsed" and v is not None}


def _ours(deltas: list[dict[str, Any]], cap: int = 1 << 20) -> dict[str, Any]:
    own = OwnFields(cap)
    for delta in deltas:
        own.add(delta)
    return own.plain()


CITED = {"url": "u", "title": "t", "start_index": 0, "end_index": 1, "content": "c"}
SEQUENCES = {
    "text": [
        {"reasoning_content": "a", "content": "x"},
        {"reasoning_content": None},
        {"reasoning_content": "b"},
    ],
    "empty text": [{"reasoning": ""}],
    "audio": [
        {"audio": {"id": "a1", "transcript": "He"}},
        {"audio": {"data": "AA", "transcript": "llo"}},
        {"audio": {"data": "BB", "expires_at": 9}},
    ],
    # whole, as providers send it: the SDK's dump adds ``None`` for a field its type declares
    "annotations": [{"annotations": [{"type": "url_citation", "url_citation": CITED}]}],
    "indexed": [
        {
            "reasoning_details": [
                {"index": 0, "type": "reasoning.text", "text": "a", "signature": None}
            ]
        },
        {
            "reasoning_details": [
                {"index": 0, "type": "reasoning.text", "text": "b"},
                {"index": 1, "type": "t"},
            ]
        },
        {"reasoning_details": [{"index": 0, "type": "reasoning.summary", "signature": "s"}]},
        {"reasoning_details": [{"index": 1, "data": "d", "n": 1}, {"index": 1, "n": 2}]},
    ],
    "extended, then indexed": [
        {"reasoning_details": []},
        {"reasoning_details": [{"type": "reasoning.text", "text": "a", "parts": ["p"]}]},
        {"reasoning_details": [{"index": 0, "text": "b", "parts": ["q"]}]},
    ],
    "scalars": [
        {"n": 1, "f": 0.5, "flag": True, "tags": ["a"]},
        {"n": 2, "f": 1, "flag": True, "tags": ["b", 3]},
    ],
    "objects": [
        {"meta": {"a": "x", "b": {"c": 1}}},
        {"meta": {"a": "y", "b": {"c": 2, "d": None}}},
    ],
    "other types": [
        {"k": "text"},
        {"k": {"a": 1}},
        {"m": [1]},
        {"m": "s"},
        {"o": {"a": 1}},
        {"o": 2},
    ],
}


@pytest.mark.parametrize("deltas", SEQUENCES.values(), ids=SEQUENCES.keys())
def test_own_fields_merge_as_the_sdks_stream_helper_merges_them(
    deltas: list[dict[str, Any]],
) -> None:
    assert _ours(deltas) == _sdk(deltas)


def _value(rng: random.Random, depth: int = 0) -> Any:
    """A field's value as a provider might stream it: texts, numbers, objects, and lists
    of scalars or of entries with an ``index`` (or without one)."""
    pick = rng.random()
    if depth > 2 or pick < 0.35:
        return rng.choice(["a", "b", "", "xy", 1, 2.5, None])
    if pick < 0.65:
        keys = rng.sample(["k", "type", "t", "index"], rng.randint(0, 2))
        return {k: _value(rng, depth + 1) for k in keys}
    entry = {"t": _value(rng, depth + 1)}
    if pick < 0.9:
        return rng.choice([[], [entry], [{"index": rng.choice([0, 1, -1]), **entry}]])
    return [_value(rng, depth + 1) for _ in range(rng.randint(0, 2))]


def test_random_deltas_merge_as_the_sdks_stream_helper_merges_them() -> None:
    rng = random.Random(16)
    for _ in range(3000):
        deltas = [{"f": _value(rng)} for _ in range(rng.randint(1, 4))]
        sdk: dict[object, object] = {}
        try:  # the helper's own merge, each delta a copy as its snapshot's dump makes it
            for delta in deltas:
                sdk = accumulate_delta(sdk, copy.deepcopy(delta))  # type: ignore[arg-type]
        except (TypeError, RuntimeError):  # the SDK fails: no client resends it
            continue
        assert _ours(deltas) == {k: v for k, v in sdk.items() if v is not None}, deltas


def test_a_list_of_objects_without_index_sent_twice_keeps_every_entry() -> None:
    # the SDK raises on the second: no client of it resends such a reply
    deltas = [{"annotations": [{"type": "a"}]}, {"annotations": [{"type": "b"}]}]
    assert _ours(deltas) == {"annotations": [{"type": "a"}, {"type": "b"}]}


def test_the_merge_copies_what_it_keeps_and_leaves_the_deltas_as_they_were() -> None:
    first = {"reasoning_details": [{"index": 0, "text": "a"}], "meta": {"k": "v"}}
    own = OwnFields(1 << 20)
    own.add(first)
    own.add({"reasoning_details": [{"index": 0, "text": "b"}], "meta": {"k": "w"}})
    assert first == {"reasoning_details": [{"index": 0, "text": "a"}], "meta": {"k": "v"}}
    assert own.plain()["meta"] == {"k": "vw"}


def test_a_field_that_would_pass_the_cap_is_left_out_whole_and_frees_its_room() -> None:
    deltas = [
        {"reasoning_content": "a" * 20, "audio": {"data": "b" * 10}},
        {"audio": {"data": "c" * 30}},  # the audio passes the cap: dropped, its room freed
        {"audio": {"data": "d"}, "reasoning_content": "e" * 30},
    ]
    assert _ours(deltas, cap=60) == {"reasoning_content": "a" * 20 + "e" * 30}


def test_a_field_nested_past_what_the_merge_recurses_into_is_left_out() -> None:
    deep: Any = "x"
    for _ in range(3000):  # JSON the provider's parser reads (orjson's limit is 1024)
        deep = {"a": deep}
    deltas = [{"deep": deep, "reasoning": "r"}, {"deep": deep, "shallow": {"a": {"b": 1}}}]
    assert _ours(deltas) == {"reasoning": "r", "shallow": {"a": {"b": 1}}}


def test_a_field_streamed_in_many_pieces_costs_its_length() -> None:
    piece = "A" * 4096
    own = OwnFields(1 << 26)
    start = time.monotonic()
    for _ in range(4000):  # joined string by string, this copies tens of gigabytes
        own.add({"audio": {"data": piece}})
    assert len(own.plain()["audio"]["data"]) == 4000 * 4096
    assert time.monotonic() - start < 2


def test_a_list_a_provider_extends_on_every_delta_costs_what_each_delta_adds() -> None:
    # a list a provider sends again on every delta (its sources): were the list so far read
    # again on each, the merge would cost the square of its length, on the event loop
    own = OwnFields(1 << 26)
    start = time.monotonic()
    for n in range(8000):
        own.add({"citations": ["https://example.com/", n]})
    assert len(own.plain()["citations"]) == 16000
    assert time.monotonic() - start < 2


def test_rounds_merge_as_one_stream_of_all_their_deltas() -> None:
    rounds = [
        {"role": "assistant", "content": "a", "reasoning_content": "x", "tool_calls": [{}]},
        {
            "role": "assistant",
            "content": "b",
            "reasoning_content": "y",
            "reasoning_details": [{"index": 0, "type": "reasoning.text", "text": "t"}],
        },
        {"content": "c", "refusal": "no", "reasoning_details": [{"index": 0, "text": "u"}]},
    ]
    assert rounds_merged(rounds) == {
        "reasoning_content": "xy",
        "reasoning_details": [{"index": 0, "type": "reasoning.text", "text": "tu"}],
        "refusal": "no",
    }
    assert rounds_merged(rounds[:1]) == {"reasoning_content": "x"}
