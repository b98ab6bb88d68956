from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings, strategies as st

from proxy.cascade.eviction import MISS_RATIO, PLACEHOLDER_PREFIX, evict
from proxy.cascade.rounds import protected_from
from proxy.cascade.types import EVICTED, READ_TOOL_OUTPUT, Budget, StageResult
from proxy.config_context import EvictionConfig
from tests.unit.cascade.builders import assistant_calls, conversation, count, tool, user

HOT = Budget(limit=10_000, reserved_output=0, occupancy=6_000)
CFG = EvictionConfig(
    at_fraction=0.5, keep_recent_rounds=1, clear_at_least=500, min_result_tokens=100
)


def _evict(messages: list[dict[str, Any]], **kw: Any) -> StageResult:
    args: dict[str, Any] = {
        "count": count,
        "budget": HOT,
        "cfg": CFG,
        "persist_raw": True,
    }
    args.update(kw)
    return evict(messages, **args)


def test_below_threshold_changes_nothing() -> None:
    msgs = conversation([4000, 4000, 4000])
    cool = Budget(limit=10_000, reserved_output=0, occupancy=4_999)
    result = _evict(msgs, budget=cool)
    assert result == StageResult(tuple(msgs))


def test_disabled_changes_nothing() -> None:
    msgs = conversation([4000, 4000, 4000])
    result = _evict(msgs, cfg=CFG.model_copy(update={"enabled": False}))
    assert result.messages == tuple(msgs) and result.events == ()


def test_evicts_all_eligible_outside_protected_rounds_in_one_pass() -> None:
    msgs = conversation([4000, 4000, 4000])
    result = _evict(msgs)
    out = result.messages
    assert out[3]["content"] == (
        f"{PLACEHOLDER_PREFIX} Result of read_file (4000 chars) was cleared to save context. "
        'Recover it with read_tool_output({"id": "c0"})'
    )
    assert out[5]["content"].startswith(PLACEHOLDER_PREFIX)
    assert out[7] is msgs[7]  # last round protected
    assert out[3]["role"] == "tool" and out[3]["tool_call_id"] == "c0"
    assert [m for i, m in enumerate(out) if i not in (3, 5)] == [
        m for i, m in enumerate(msgs) if i not in (3, 5)
    ]
    (event,) = result.events
    assert event.name == EVICTED
    reclaimed = 2 * (1000 - len(out[3]["content"]) // 4)
    assert event.data == {
        "count": 2,
        "tokens_reclaimed": reclaimed,
        "tool_call_ids": ["c0", "c1"],
        "handles": ["c0", "c1"],  # no positions: the placeholders name the bare ids
    }


def test_too_little_to_reclaim_changes_nothing() -> None:
    msgs = conversation([1200, 4000])  # one eligible result, ~270 tokens reclaimable
    assert _evict(msgs).messages == tuple(msgs)
    assert _evict(msgs).events == ()


def test_batches_everything_once_the_threshold_is_met() -> None:
    msgs = conversation([1200, 1200, 1200, 1200, 100])
    result = _evict(msgs)
    assert result.events[0].data["count"] == 4


def test_a_pass_that_re_bills_more_than_it_reclaims_changes_nothing() -> None:
    # c0 would free ~970 tokens (>= clear_at_least), but the placeholder turns the protected
    # 3000-token round after it into a cache miss: MISS_RATIO * 3000 > 970.
    msgs = conversation([4000, 12_000])
    assert _evict(msgs) == StageResult(tuple(msgs))
    # the same result behind a small protected round is worth clearing
    small_tail = conversation([4000, 400])
    result = _evict(small_tail)
    assert result.messages[3]["content"].startswith(PLACEHOLDER_PREFIX)
    assert result.events[0].data["tokens_reclaimed"] >= MISS_RATIO * count(result.messages[3:])


def test_small_results_are_not_evicted() -> None:
    msgs = conversation([4000, 300, 4000, 10])
    out = _evict(msgs).messages
    assert out[5] is msgs[5]  # 75 tokens < min_result_tokens
    assert out[3]["content"].startswith(PLACEHOLDER_PREFIX)
    assert out[7]["content"].startswith(PLACEHOLDER_PREFIX)


def test_excluded_tools_and_read_tool_output_are_kept() -> None:
    msgs = [
        user("go"),
        assistant_calls(("a", "keep_me", {}), ("b", READ_TOOL_OUTPUT, {}), ("c", "grep", {})),
        tool("a", "x" * 4000),
        tool("b", "x" * 4000),
        tool("c", "x" * 4000),
        assistant_calls(("d", "grep", {})),
        tool("d", "x" * 4000),
    ]
    cfg = CFG.model_copy(update={"exclude_tools": ("keep_me",)})
    out = _evict(msgs, cfg=cfg).messages
    assert out[2] is msgs[2] and out[3] is msgs[3]
    assert out[4]["content"].startswith(PLACEHOLDER_PREFIX)


def test_without_persist_raw_placeholder_has_no_handle() -> None:
    result = _evict(conversation([4000, 4000]), persist_raw=False)
    assert result.messages[3]["content"] == (
        f"{PLACEHOLDER_PREFIX} Result of read_file (4000 chars) was cleared to save context; "
        "re-run the tool if you need it."
    )


def test_unspillable_results_get_no_handle() -> None:
    result = _evict(conversation([4000, 4000, 4000]), unspillable=frozenset({"c0"}))
    assert "re-run the tool" in result.messages[3]["content"]
    assert READ_TOOL_OUTPUT in result.messages[5]["content"]


def test_placeholder_keeps_other_keys() -> None:
    msgs = [assistant_calls(("a", "grep", {})), tool("a", "x" * 4000, name="grep")]
    msgs += [assistant_calls(("b", "grep", {})), tool("b", "y")]
    out = _evict(msgs).messages
    assert out[1]["name"] == "grep" and out[1]["tool_call_id"] == "a"
    assert set(out[1]) == set(msgs[1])


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def test_a_placeholder_says_which_parts_of_the_result_only_a_re_run_brings_back() -> None:
    # A result of text and image parts is cleared whole (freeing the window is the point);
    # its text pages back through read_tool_output, its images do not.
    msgs = conversation([4000, 4000, 4000])
    msgs[3] = {**msgs[3], "content": [{"type": "text", "text": "x" * 4000}, IMAGE, IMAGE]}
    msgs[5] = {**msgs[5], "content": [{"type": "text", "text": "x" * 4000}]}
    out = _evict(msgs).messages
    assert out[3]["content"] == (
        f"{PLACEHOLDER_PREFIX} Result of read_file (4000 chars, and 2 image_url parts that "
        "only re-running the tool brings back) was cleared to save context. "
        'Recover it with read_tool_output({"id": "c0"})'
    )
    assert out[5]["content"].startswith(f"{PLACEHOLDER_PREFIX} Result of read_file (4000 chars)")


def test_legacy_function_pairs_are_neither_cleared_nor_counted_as_rounds() -> None:
    # A history mixing tool rounds with legacy pairs (assistant function_call, then a
    # role "function" result): a legacy result has no id for a handle and is never cleared,
    # so its pair is no round keepRecentRounds counts either; the last N tool rounds stay
    # whole wherever the legacy pairs sit.
    def legacy(i: int) -> list[dict[str, Any]]:
        call = {"name": "ls", "arguments": json.dumps({"i": i})}
        return [
            {"role": "assistant", "content": None, "function_call": call},
            {"role": "function", "name": "ls", "content": "y" * 800},  # over minResultTokens
        ]

    msgs = conversation([4000, 400])  # system, user, c0 at 2-3, c1 at 4-5, user
    msgs[4:4] = legacy(0)  # between the tool rounds
    msgs[-1:-1] = legacy(1)  # the newest pair
    tool_round, legacy_results = [3], [5, 9]
    assert [msgs[i]["role"] for i in tool_round + legacy_results] == [
        "tool",
        "function",
        "function",
    ]
    one = _evict(msgs)
    cleared = [i for i, m in enumerate(one.messages) if m is not msgs[i]]
    assert cleared == tool_round and one.events[0].data["tool_call_ids"] == ["c0"]
    # Two rounds are c0's and c1's: the legacy pairs after each do not push c0 out.
    two = _evict(msgs, cfg=CFG.model_copy(update={"keep_recent_rounds": 2}))
    assert two.messages == tuple(msgs) and two.events == ()
    assert protected_from(msgs, 2) == 2 and protected_from(msgs, 1) == 6


def test_placeholders_are_never_re_evicted() -> None:
    msgs = conversation([4000, 4000, 4000])
    once = _evict(msgs)
    twice = _evict(list(once.messages))
    assert twice.messages == once.messages
    assert twice.events == ()


# --- properties ------------------------------------------------------------------------


@st.composite
def _histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [user("go")]
    n = 0
    for _ in range(draw(st.integers(min_value=0, max_value=8))):
        width = draw(st.integers(min_value=1, max_value=3))
        calls = []
        for _ in range(width):
            calls.append(
                (f"c{n}", draw(st.sampled_from(["grep", "ls", "keep", READ_TOOL_OUTPUT])), {})
            )
            n += 1
        msgs.append(assistant_calls(*calls))
        for cid, _, _ in calls:
            msgs.append(tool(cid, "r" * draw(st.integers(min_value=0, max_value=3000))))
        if draw(st.booleans()):
            msgs.append(user("more"))
    return msgs


_cfgs = st.builds(
    EvictionConfig,
    keep_recent_rounds=st.integers(min_value=0, max_value=4),
    clear_at_least=st.integers(min_value=0, max_value=2000),
    min_result_tokens=st.integers(min_value=0, max_value=400),
    exclude_tools=st.just(("keep",)),
)


@given(_histories(), _cfgs, st.booleans())
@settings(max_examples=100, deadline=None)
def test_eviction_invariants(
    msgs: list[dict[str, Any]], cfg: EvictionConfig, persist_raw: bool
) -> None:
    result = _evict(msgs, cfg=cfg, persist_raw=persist_raw)
    out = result.messages
    # never splits, reorders, drops or re-roles anything
    assert [(m["role"], m.get("tool_call_id"), m.get("tool_calls")) for m in out] == [
        (m["role"], m.get("tool_call_id"), m.get("tool_calls")) for m in msgs
    ]
    # protected rounds untouched
    start = protected_from(msgs, cfg.keep_recent_rounds)
    assert out[start:] == tuple(msgs[start:])
    # only tool contents change; excluded and recovery results untouched
    names = {c["id"]: c["function"]["name"] for m in msgs for c in m.get("tool_calls") or ()}
    for before, after in zip(msgs, out, strict=True):
        if after is not before:
            assert before["role"] == "tool"
            assert names[before["tool_call_id"]] not in ("keep", READ_TOOL_OUTPUT)
            assert after["content"].startswith(PLACEHOLDER_PREFIX)
    # all or nothing per pass, and it reclaims at least clear_at_least and MISS_RATIO times
    # the tokens from the first cleared result on (the part the pass turns into cache misses)
    if result.events:
        reclaimed = result.events[0].data["tokens_reclaimed"]
        assert reclaimed >= cfg.clear_at_least
        first = next(i for i, (a, b) in enumerate(zip(msgs, out, strict=True)) if a is not b)
        assert reclaimed >= MISS_RATIO * count(out[first:])
        assert count(out) < count(msgs)
    else:
        assert out == tuple(msgs)
    # idempotent
    again = _evict(list(out), cfg=cfg, persist_raw=persist_raw)
    assert again.messages == out and again.events == ()
