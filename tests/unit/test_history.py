from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from proxy.history import (
    Append,
    Supersede,
    canonical_json,
    canonical_message,
    chain,
    chain_hash,
    hashes_after,
    plan_divergence,
    plan_reconcile,
)


def matched_prefix_len(stored_hashes: list[str], incoming_hashes: list[str]) -> int:
    """What ``store.messages.FETCH_MATCHED_LEN`` computes in SQL, over lists: each hash covers
    its whole prefix, so the highest stored position whose hash the client sent ends it."""
    wanted = set(incoming_hashes)
    for pos in range(len(stored_hashes) - 1, -1, -1):
        if stored_hashes[pos] in wanted:
            return pos + 1
    return 0


def reconcile(stored_hashes: list[str], incoming_hashes: list[str]) -> Append | Supersede:
    """The shell's two queries as one in-memory model: the fast path, else the divergence."""
    head = stored_hashes[-1] if stored_hashes else None
    fast = plan_reconcile(incoming_hashes, stored_len=len(stored_hashes), stored_head_hash=head)
    if fast is not None:
        return fast
    matched = matched_prefix_len(stored_hashes, incoming_hashes)
    return plan_divergence(incoming_hashes, matched_len=matched, stored_len=len(stored_hashes))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def calls(*specs: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in specs
        ],
    }


def sdk_dump(msg: dict[str, Any]) -> dict[str, Any]:
    """What `ChatCompletionMessage.model_dump()` looks like for the same message."""
    out: dict[str, Any] = {
        "content": msg.get("content"),
        "refusal": None,
        "role": msg["role"],
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": None,
    }
    if msg.get("tool_calls"):
        out["tool_calls"] = [
            {"index": k, **call, "function": {**call["function"]}}
            for k, call in enumerate(msg["tool_calls"])
        ]
    return out


# canonical_message


def test_canonical_drops_none_fields() -> None:
    assert canonical_message({"role": "user", "content": "hi", "name": None}) == user("hi")


@pytest.mark.parametrize("key", ["annotations", "audio", "refusal", "function_call"])
@pytest.mark.parametrize("empty", [None, [], {}, ""])
def test_canonical_drops_empty_sdk_fields(key: str, empty: Any) -> None:
    assert canonical_message({**assistant("x"), key: empty}) == assistant("x")


def test_canonical_keeps_non_empty_sdk_fields() -> None:
    msg = {**assistant(""), "refusal": "no"}
    assert canonical_message(msg)["refusal"] == "no"


def test_canonical_drops_empty_tool_calls() -> None:
    assert canonical_message({**assistant("x"), "tool_calls": []}) == assistant("x")


def test_canonical_tool_calls_keep_only_wire_fields() -> None:
    msg = {
        "role": "assistant",
        "tool_calls": [
            {"index": 0, "id": "c1", "function": {"name": "grep", "arguments": "{}", "x": 1}}
        ],
    }
    assert canonical_message(msg) == calls(("c1", "grep", "{}"))


def test_canonical_assistant_empty_content_equals_missing() -> None:
    with_calls = calls(("c1", "grep", "{}"))
    assert canonical_message({**with_calls, "content": ""}) == canonical_message(with_calls)
    assert canonical_message({**with_calls, "content": None}) == canonical_message(with_calls)


def test_what_a_client_rewrote_in_a_reply_hashes_as_another_message() -> None:
    """README, Decisions, "Stored reply": the text as one text part, the arguments written
    again with other whitespace, a provider's extra field left out are each another
    message than the stored reply (it is superseded), not normalised away: the provider is
    sent the stored form of a row whose hash matches, and those forms differ to it."""
    reply = assistant("hello")
    as_parts = {**reply, "content": [{"type": "text", "text": "hello"}]}
    assert chain([as_parts]) != chain([reply])
    spaced, tight = calls(("c1", "grep", '{"q": "x"}')), calls(("c1", "grep", '{"q":"x"}'))
    assert chain([spaced]) != chain([tight])
    reasoned = {**reply, "reasoning_content": "thinking"}
    assert chain([reasoned]) != chain([reply])


def test_canonical_user_empty_content_is_kept() -> None:
    assert canonical_message(user("")) == user("")


def test_canonical_keeps_unknown_fields() -> None:
    msg = {**user("hi"), "cache_control": {"type": "ephemeral"}}
    assert canonical_message(msg) == msg


def test_canonical_does_not_mutate_input() -> None:
    msg = {**calls(("c1", "f", "{}")), "refusal": None}
    msg["tool_calls"][0]["index"] = 0
    before = repr(msg)
    canonical_message(msg)
    assert repr(msg) == before


def test_canonical_json_is_sorted_compact_utf8() -> None:
    assert canonical_json({"role": "user", "content": "é"}) == '{"content":"é","role":"user"}'


# chain


def test_chain_hash_is_sha256_of_prev_newline_json() -> None:
    expected = hashlib.sha256(b'p\n{"content":"a","role":"user"}').hexdigest()
    assert chain_hash("p", user("a")) == expected


def test_chain_links_each_hash_to_the_previous() -> None:
    msgs = [user("a"), assistant("b")]
    h = chain(msgs)
    assert h == [chain_hash("", msgs[0]), chain_hash(h[0], msgs[1])]


def test_chain_seed_changes_every_hash() -> None:
    msgs = [user("a"), assistant("b")]
    assert set(chain(msgs, seed="s")).isdisjoint(chain(msgs))


def test_chain_order_matters() -> None:
    assert chain([user("a"), user("b")])[-1] != chain([user("b"), user("a")])[-1]


def test_chain_of_empty_is_empty() -> None:
    assert chain([]) == []


_text = st.text(max_size=8)
_msg = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["system", "user", "assistant", "tool"]),
    _text,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_msg, max_size=8), st.integers(0, 8))
def test_chain_is_prefix_stable(msgs: list[dict[str, Any]], k: int) -> None:
    full = chain(msgs)
    assert chain(msgs[:k]) == full[:k]
    seed = full[k - 1] if 0 < k <= len(msgs) else ""
    if k <= len(msgs):
        assert chain(msgs[k:], seed=seed) == full[k:]


_call = st.tuples(
    st.text("abc123", min_size=1, max_size=4), st.sampled_from(["grep", "read"]), _text
)


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        _text.map(assistant), st.lists(_call, min_size=1, max_size=3).map(lambda cs: calls(*cs))
    )
)
def test_sdk_dump_hashes_equal_to_minimal_message(msg: dict[str, Any]) -> None:
    assert canonical_json(sdk_dump(msg)) == canonical_json(msg)
    assert chain_hash("x", sdk_dump(msg)) == chain_hash("x", msg)


def test_distinct_messages_hash_differently() -> None:
    assert chain_hash("", user("a")) != chain_hash("", user("b"))
    assert chain_hash("", calls(("c1", "f", "{}"))) != chain_hash("", calls(("c2", "f", "{}")))


# reconciliation


def test_plan_reconcile_empty_store_appends_everything() -> None:
    assert plan_reconcile(["h"], stored_len=0, stored_head_hash=None) == Append(0)


def test_plan_reconcile_extended_history_appends_tail() -> None:
    h = chain([user("a"), assistant("b"), user("c")])
    assert plan_reconcile(h, stored_len=2, stored_head_hash=h[1]) == Append(2)


def test_plan_reconcile_identical_history_appends_nothing() -> None:
    h = chain([user("a"), assistant("b")])
    assert plan_reconcile(h, stored_len=2, stored_head_hash=h[1]) == Append(len(h))


def test_plan_reconcile_head_mismatch_needs_lookup() -> None:
    h = chain([user("a"), assistant("edited")])
    assert plan_reconcile(h, stored_len=2, stored_head_hash="other") is None


def test_plan_reconcile_shorter_history_needs_lookup() -> None:
    h = chain([user("a")])
    assert plan_reconcile(h, stored_len=2, stored_head_hash="x") is None


def test_plan_divergence_supersedes_stored_tail() -> None:
    assert plan_divergence(["a", "b", "c"], matched_len=1, stored_len=3) == Supersede(1)


def test_plan_divergence_no_common_prefix_supersedes_all() -> None:
    assert plan_divergence(["z"], matched_len=0, stored_len=2) == Supersede(0)


def test_plan_divergence_strict_prefix_supersedes_tail_appends_nothing() -> None:
    # regenerate: the client resends the history up to the last user message
    assert plan_divergence(["a", "b"], matched_len=2, stored_len=3) == Supersede(2)


def test_plan_divergence_full_match_appends() -> None:
    assert plan_divergence(["a", "b", "c"], matched_len=2, stored_len=2) == Append(2)


@pytest.mark.parametrize("matched", [-1, 3])
def test_plan_divergence_rejects_impossible_match(matched: int) -> None:
    with pytest.raises(ValueError, match="matched_len"):
        plan_divergence(["a", "b"], matched_len=matched, stored_len=2)


def test_matched_prefix_len() -> None:
    stored = chain([user("a"), assistant("b"), user("c")])
    assert matched_prefix_len(stored, chain([user("a"), assistant("B")])) == 1
    assert matched_prefix_len(stored, chain([user("x")])) == 0
    assert matched_prefix_len(stored, stored[:2]) == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(_msg, max_size=6), st.lists(_msg, max_size=6), st.integers(0, 6))
def test_reconcile_applies_to_incoming(
    stored_msgs: list[dict[str, Any]], extra: list[dict[str, Any]], keep: int
) -> None:
    """Applying the plan to the store always yields exactly the incoming history."""
    incoming = stored_msgs[:keep] + extra
    plan = reconcile(chain(stored_msgs), chain(incoming))
    start = plan.start if isinstance(plan, Append) else plan.from_pos
    kept = stored_msgs if isinstance(plan, Append) else stored_msgs[: plan.from_pos]
    assert [canonical_json(m) for m in kept + incoming[start:]] == [
        canonical_json(m) for m in incoming
    ]
    if isinstance(plan, Append):
        assert start == len(stored_msgs)


def test_hashes_after_writes_the_message_once_for_every_previous_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a superseded row is checked after each row once at the position before it, and a tool
    # result's canonical form can be megabytes: written once, hashed after each
    import proxy.history as history

    msg = {"role": "tool", "tool_call_id": "c1", "content": "x" * 1000}
    found, missing = chain_hash("c", msg), chain_hash("e", msg)
    written = []
    real = history.dumps_sorted
    monkeypatch.setattr(history, "dumps_sorted", lambda *a, **k: written.append(1) or real(*a, **k))
    assert hashes_after(["a", "b", "c", "d"], msg, found)
    assert not hashes_after(["a", "b", "c", "d"], msg, missing)
    assert len(written) == 2
