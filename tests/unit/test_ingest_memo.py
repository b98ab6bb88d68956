from __future__ import annotations

from typing import Any

from proxy.cascade.tokens import MemoCounter, message_cost
from proxy.config_context import ContextConfig
from proxy.history import chain
from proxy.services.incoming import ingest_from
from proxy.services.ingestmemo import IngestMemo

LOG = "\n".join(f"{n:5d} INFO worker {n % 7} handled request {n}" for n in range(400))


def _call(call_id: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        ],
    }


def _history() -> list[dict[str, Any]]:
    """A resumed conversation: a result compacted against an earlier one, a secret, a cut."""
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Look at the logs."},
        _call("a"),
        {"role": "tool", "tool_call_id": "a", "content": LOG},
        _call("b"),
        {"role": "tool", "tool_call_id": "b", "content": LOG + "\n  401 INFO done"},
        _call("c"),
        {"role": "tool", "tool_call_id": "c", "content": "key sk-" + "A1b2C3d4" * 6},
        _call("d"),
        {"role": "tool", "tool_call_id": "d", "content": "x" * 30_000},
        {"role": "assistant", "content": "Done."},
    ]


def _rows(messages: list[dict[str, Any]], ctx: ContextConfig, memo: IngestMemo | None) -> Any:
    count = MemoCounter(message_cost())
    return ingest_from(messages, chain(messages), 0, ctx, count, memo=memo), count


def test_a_remembered_prefix_ingests_to_what_a_fresh_ingest_gives() -> None:
    ctx = ContextConfig()
    fresh, _ = _rows(_history(), ctx, None)
    assert any(e.data.get("compacted") for e in fresh.events)  # the case is exercised
    assert any(r.redacted for r in fresh.rows) and fresh.raw
    memo = IngestMemo()
    first, _ = _rows(_history(), ctx, memo)
    again_messages = _history()
    again, count = _rows(again_messages, ctx, memo)
    for got in (first, again):
        assert got.rows == fresh.rows
        assert got.events == fresh.events and got.raw == fresh.raw
        assert got.new == fresh.new
    # the second request took the first one's answers: changed messages are the same
    # objects; unchanged ones are its own (verbatim), priced without counting again
    for (_, a), (pos, b), row in zip(first.new, again.new, again.rows, strict=True):
        if row.verbatim:
            assert b is again_messages[pos]
        else:
            assert b is a
        assert count._memo[id(b)][1] == row.tokens


def test_another_config_or_an_unequal_message_is_ingested_afresh() -> None:
    memo = IngestMemo()
    ctx = ContextConfig()
    _rows(_history(), ctx, memo)
    other = ContextConfig.model_validate({"toolOutput": {"compact": False}})
    got, _ = _rows(_history(), other, memo)
    assert got == _rows(_history(), other, None)[0]
    assert not any(e.data.get("compacted") for e in got.events)
    # a None field is dropped by the chain hash but kept in the stored message
    changed = _history()
    changed[3] = {**changed[3], "name": None}
    got, _ = _rows(changed, ctx, memo)
    assert got.rows[3].message == {**fresh_row(ctx, 3), "name": None}


def fresh_row(ctx: ContextConfig, pos: int) -> dict[str, Any]:
    return dict(_rows(_history(), ctx, None)[0].rows[pos].message)


def test_the_memo_stays_within_its_character_budget() -> None:
    memo = IngestMemo(max_chars=20_000)
    _rows(_history(), ContextConfig(), memo)
    assert memo._chars <= 20_000
    assert sum(e.weight for e in memo._entries.values()) == memo._chars


def test_a_message_of_tiny_items_weighs_what_it_holds_parsed() -> None:
    """Only content's characters were weighed: a message holding a client's field of a
    hundred thousand empty arrays weighed about 100, so the budget let a great many such
    messages (each tens of megabytes parsed) be held."""
    tiny = {"role": "user", "content": "hi", "x": [[] for _ in range(100_000)]}
    memo = IngestMemo(max_chars=3_000_000)
    _rows([tiny], ContextConfig(), memo)
    assert memo._entries == {}  # past the budget alone
    _rows([{"role": "user", "content": "hi", "x": [[]] * 10}], ContextConfig(), memo)
    assert 100 < memo._chars < 2_000
