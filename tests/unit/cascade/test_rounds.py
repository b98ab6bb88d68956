from __future__ import annotations

from hypothesis import given, settings, strategies as st

from proxy.cascade.rounds import Round, call_name, group_rounds, protected_from, tool_names
from tests.unit.cascade.builders import assistant, assistant_calls, conversation, tool, user


def test_parallel_calls_are_one_round() -> None:
    msgs = [
        user("go"),
        assistant_calls(("a", "grep", {}), ("b", "ls", {})),
        tool("a", "1"),
        tool("b", "2"),
        assistant("done"),
    ]
    assert group_rounds(msgs) == (Round(1, 4, ("a", "b")),)


def test_consecutive_rounds() -> None:
    msgs = conversation([10, 10, 10])
    assert [(r.start, r.end) for r in group_rounds(msgs)] == [(2, 4), (4, 6), (6, 8)]


def test_late_result_extends_and_merges_rounds() -> None:
    msgs = [
        assistant_calls(("a", "grep", {})),
        user("interrupt"),
        assistant_calls(("b", "ls", {})),
        tool("b", "2"),
        tool("a", "1"),  # answers the first call, out of place
        user("next"),
    ]
    assert group_rounds(msgs) == (Round(0, 5, ("a", "b")),)


def test_orphan_tool_result_belongs_to_no_round() -> None:
    msgs = [user("go"), tool("zzz", "orphan"), assistant_calls(("a", "x", {})), tool("a", "1")]
    assert group_rounds(msgs) == (Round(2, 4, ("a",)),)


def test_assistant_without_calls_is_not_a_round() -> None:
    assert group_rounds([assistant("hi"), {"role": "assistant", "tool_calls": []}]) == ()


def test_protected_from() -> None:
    msgs = conversation([10, 10, 10])
    assert protected_from(msgs, 0) == len(msgs)
    assert protected_from(msgs, 1) == 6
    assert protected_from(msgs, 3) == 2
    assert protected_from(msgs, 4) == 0


def test_tool_names_from_calls_with_tool_name_fallback() -> None:
    msgs = [assistant_calls(("a", "grep", {})), tool("a", "1"), tool("legacy", "x", name="ls")]
    assert tool_names(msgs) == {"a": "grep", "legacy": "ls"}


def test_call_name_is_the_call_of_the_results_own_round() -> None:
    msgs = [
        tool("orphan", "0"),
        assistant_calls(("call_0", "keep_me", {}), ("call_1", "ls", {})),
        tool("call_0", "1"),
        tool("call_1", "2"),
        assistant_calls(("call_0", "grep", {})),
        tool("call_0", "3"),
    ]
    assert [call_name(msgs, i) for i in (0, 2, 3, 5)] == [None, "keep_me", "ls", "grep"]
    assert tool_names(msgs)["call_0"] == "grep"


_steps = st.lists(
    st.one_of(
        st.just("user"),
        st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3, unique=True),
        st.sampled_from(["ta", "tb", "tc", "td", "te", "tf", "tz"]),
    ),
    max_size=14,
)


def _build(steps: list[object]) -> list[dict[str, object]]:
    msgs: list[dict[str, object]] = []
    for n, step in enumerate(steps):
        if step == "user":
            msgs.append(user("u"))
        elif isinstance(step, str):
            msgs.append(tool(step[1], "r"))
        else:
            msgs.append(assistant_calls(*((f"{cid}", "f", {"n": n}) for cid in step)))
    return msgs


@given(_steps)
@settings(max_examples=100, deadline=None)
def test_rounds_are_disjoint_ordered_and_hold_their_results(steps: list[object]) -> None:
    msgs = _build(steps)
    rounds = group_rounds(msgs)
    for prev, nxt in zip(rounds, rounds[1:], strict=False):
        assert prev.end <= nxt.start
    for r in rounds:
        assert msgs[r.start]["role"] == "assistant"
        assert 0 <= r.start < r.end <= len(msgs)
    # every tool result answering an earlier call lies in the round of that call
    last_owner: dict[str, Round] = {}
    for i, m in enumerate(msgs):
        for r in rounds:
            if r.start == i:
                for cid in r.tool_call_ids:
                    last_owner[cid] = r
        if m["role"] == "assistant" and not any(r.start <= i < r.end for r in rounds):
            raise AssertionError("assistant with calls outside every round")
        if m["role"] == "tool" and m["tool_call_id"] in last_owner:
            owner = next(r for r in rounds if r.start <= i < r.end)
            assert m["tool_call_id"] in owner.tool_call_ids
