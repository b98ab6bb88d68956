from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from proxy.cascade.overflow import GuardResult, guard
from proxy.cascade.types import TRIMMED, ContextLengthExceeded, Event
from tests.unit.cascade.summary_builders import (
    assistant,
    assistant_calls,
    conversations,
    count,
    legacy_call,
    legacy_result,
    system,
    tool,
    user,
)


def _words(n: int) -> str:
    return "w" * (4 * n)  # exactly n tokens under ``count``


def _prompt() -> list[dict[str, Any]]:
    return [
        system(_words(10)),  # 0
        user(_words(10)),  # 1 carries the summary
        assistant_calls(("c1", "cat", {})),  # 2
        tool("c1", _words(100)),  # 3
        assistant(_words(20)),  # 4
        user(_words(30)),  # 5
        assistant(_words(5)),  # 6
        user(_words(10)),  # 7 current turn
        assistant_calls(("c2", "ls", {})),  # 8
        tool("c2", _words(40)),  # 9
    ]  # 225 tokens


def test_guard_returns_prompt_unchanged_when_it_fits() -> None:
    msgs = _prompt()
    out = guard(msgs, count=count, limit=300, reserved_output=75, protected_head=2)
    assert out == GuardResult(tuple(msgs), (), 0)


def test_guard_drops_oldest_round_whole_and_emits_trimmed() -> None:
    msgs = _prompt()
    out = guard(msgs, count=count, limit=300, reserved_output=100, protected_head=2)
    assert out.messages == (msgs[0], msgs[1], *msgs[4:])
    assert out.dropped == 2
    assert out.events == (
        Event(TRIMMED, {"dropped_messages": 2, "tokens_before": 225, "tokens_after": 125}),
    )


def test_guard_drops_only_as_much_as_needed() -> None:
    msgs = _prompt()
    out = guard(msgs, count=count, limit=300, reserved_output=180, protected_head=2)
    assert out.messages == (msgs[0], msgs[1], *msgs[5:])  # the round and 4 go; 5 still fits
    assert count(out.messages) == 105


def test_guard_keeps_the_current_turn_even_if_that_means_refusing() -> None:
    msgs = _prompt()
    with pytest.raises(ContextLengthExceeded) as err:
        guard(msgs, count=count, limit=100, reserved_output=40, protected_head=2)
    text = str(err.value)  # all droppable history gone would still leave 70 > 60
    assert "needs about 70 tokens but 60 are available" in text  # what it could send
    assert "the prompt as assembled is 225" in text
    assert "limit 100, reserved for output 40" in text
    assert "(the 7th message from the end, role tool)" in text and "100 tokens" in text
    assert "contextLimit" in text


def test_the_refusal_names_the_tools_apart_from_the_output() -> None:
    """The tools' tokens the budget sets aside are not output: lowering max_tokens cannot
    win them back, so the message does not count them as output."""
    with pytest.raises(ContextLengthExceeded) as err:
        guard(_prompt(), count=count, limit=100, reserved_output=40, fixed=15, protected_head=2)
    assert "(limit 100, reserved for output 25 and for the tools 15)" in str(err.value)


def test_output_and_tools_that_fill_the_window_are_named_not_a_message() -> None:
    """No prompt fits once the output and the tools take the whole window, though the
    output alone does not: shortening a message or a new session cannot help."""
    with pytest.raises(ContextLengthExceeded) as err:
        guard(_prompt(), count=count, limit=100, reserved_output=120, fixed=60, protected_head=2)
    text = str(err.value)
    assert "The output reserved (60) and the tools (60) fill the window (limit 100)" in text
    assert "shorten it" not in text


def test_guard_refuses_when_a_single_message_is_too_large() -> None:
    msgs = [system("s"), user(_words(5_000))]
    with pytest.raises(ContextLengthExceeded, match=r"\(the last message, role user\)"):
        guard(msgs, count=count, limit=4_000, reserved_output=500, protected_head=1)


def test_a_refused_head_message_is_named_by_what_it_is() -> None:
    """The protected head is no run of the client's list: a system message, or the first
    user message with the summary folded in."""
    for big, named in ((0, "(a system message)"), (1, "(the first user message, which carries")):
        msgs = _prompt()
        msgs[big] = {**msgs[big], "content": _words(500)}
        with pytest.raises(ContextLengthExceeded) as err:
            guard(msgs, count=count, limit=300, reserved_output=40, protected_head=2)
        assert named in str(err.value)


def test_a_refused_developer_message_is_named_as_one() -> None:
    """A leading ``developer`` message (OpenAI's newer name for ``system``) is an instruction
    of the head like a system message, not the user message that carries the summary."""
    msgs = _prompt()
    msgs[0] = {"role": "developer", "content": _words(500)}
    with pytest.raises(ContextLengthExceeded) as err:
        guard(msgs, count=count, limit=300, reserved_output=40, protected_head=2)
    assert "(a developer message)" in str(err.value)


def test_guard_never_orphans_results_of_a_call_in_the_protected_head() -> None:
    msgs = [
        system(),
        assistant_calls(("c1", "ls", {})),
        tool("c1", _words(5)),
        assistant(_words(50)),
        user(_words(5)),
    ]
    out = guard(msgs, count=count, limit=40, reserved_output=0, protected_head=2)
    assert out.messages == (msgs[0], msgs[1], msgs[2], msgs[4])


def test_guard_drops_a_legacy_function_call_with_its_result() -> None:
    # dropping the call alone would fit; a function result without its call is no valid prompt
    msgs = [
        system(_words(10)),
        user(_words(10)),
        legacy_call("lookup", {"x": 1}, text=_words(50)),
        legacy_result("lookup", _words(50)),
        assistant(_words(20)),
        user(_words(10)),
    ]
    out = guard(msgs, count=count, limit=300, reserved_output=180, protected_head=2)
    assert out.messages == (msgs[0], msgs[1], msgs[4], msgs[5])
    assert out.gone == (2, 3)


def test_guard_never_orphans_a_legacy_function_call_in_the_protected_head() -> None:
    msgs = [
        system(),
        legacy_call("lookup", {}),
        legacy_result("lookup", _words(5)),
        assistant(_words(50)),
        user(_words(5)),
    ]
    out = guard(msgs, count=count, limit=40, reserved_output=0, protected_head=2)
    assert out.messages == (msgs[0], msgs[1], msgs[2], msgs[4])


@settings(max_examples=100, deadline=None)
@given(conversations(max_turns=10), st.integers(0, 900), st.integers(0, 200), st.booleans())
def test_guard_invariants(msgs: list[Any], limit: int, reserved: int, whole_turn: bool) -> None:
    budget = limit - reserved
    try:
        out = guard(
            msgs, count=count, limit=limit, reserved_output=reserved, protected_head=2,
            trim_current_turn=not whole_turn,
        )  # fmt: skip
    except ContextLengthExceeded:
        return
    kept = out.messages
    assert count(kept) <= budget
    assert out.dropped == len(msgs) - len(kept)
    assert kept[:2] == tuple(msgs[:2])
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    if whole_turn:
        assert kept[len(kept) - (len(msgs) - last_user) :] == tuple(msgs[last_user:])
    assert any(m is msgs[last_user] for m in kept) and kept[-1] is msgs[-1]
    # rounds are never split: every kept call has its results, every kept result its call
    calls = {c["id"] for m in kept for c in m.get("tool_calls") or ()}
    results = {m["tool_call_id"] for m in kept if m["role"] == "tool"}
    assert calls == results
    for i, m in enumerate(kept):
        if m["role"] == "tool":
            assert kept[i - 1]["role"] == "tool" or kept[i - 1].get("tool_calls")
    assert kept == tuple(m for m in msgs if any(m is k for k in kept))  # order preserved


def test_guard_trims_old_rounds_of_the_current_turn_only_when_asked() -> None:
    msgs = [
        system(),
        user(_words(5)),  # summary carrier and the only user message
        assistant_calls(("c1", "cat", {})),
        tool("c1", _words(100)),
        assistant_calls(("c2", "cat", {})),
        tool("c2", _words(100)),
        assistant_calls(("c3", "cat", {})),
        tool("c3", _words(10)),
    ]
    kwargs: dict[str, Any] = {"count": count, "limit": 150, "reserved_output": 0}
    with pytest.raises(ContextLengthExceeded):
        guard(msgs, protected_head=2, **kwargs)
    out = guard(msgs, protected_head=2, trim_current_turn=True, **kwargs)
    assert out.messages == (*msgs[:2], *msgs[4:])
    with pytest.raises(ContextLengthExceeded):  # the newest round is never dropped
        guard(msgs, protected_head=2, trim_current_turn=True, **{**kwargs, "limit": 15})


def test_guard_trims_down_to_the_target_once_it_must_trim() -> None:
    """A low watermark: one deeper cut now instead of one round more at every later step."""
    msgs = _prompt()  # 225 tokens; budget 200
    minimal = guard(msgs, count=count, limit=250, reserved_output=50, protected_head=2)
    deep = guard(msgs, count=count, limit=250, reserved_output=50, protected_head=2, target=90)
    assert count(minimal.messages) <= 200
    assert count(deep.messages) <= 90 < count(minimal.messages)
    assert deep.dropped > minimal.dropped


def test_guard_falls_back_to_the_budget_when_the_target_is_unreachable() -> None:
    msgs = _prompt()
    out = guard(msgs, count=count, limit=250, reserved_output=50, protected_head=2, target=5)
    plain = guard(msgs, count=count, limit=250, reserved_output=50, protected_head=2)
    assert out.messages == plain.messages


def test_guard_target_is_ignored_when_nothing_needs_trimming() -> None:
    msgs = _prompt()
    out = guard(msgs, count=count, limit=300, reserved_output=75, protected_head=2, target=10)
    assert out.dropped == 0 and out.messages == tuple(msgs)


def test_a_text_agents_task_stays_and_its_steps_go_whole() -> None:
    """A text-action agent (smolagents) sends its tool observations as user messages; the
    turn's own user message is its task, and the guard keeps it as it keeps a tool agent's,
    trimming the turn's older steps instead, each thought with its observation (a round),
    so no observation is left after another user message. It took the latest observation
    for the last user message, so the task was the first thing dropped, for good."""
    from dataclasses import replace

    from proxy.cascade.overflow import OVERFLOW
    from proxy.cascade.pipeline import StepInput, assemble
    from proxy.cascade.types import Budget
    from proxy.config_context import ContextConfig

    window = [system(_words(10)), user("New task: " + _words(10))]
    for i in range(6):
        window += [assistant(f"Thought {i}: " + _words(5 + i)), user("Observation: " + _words(60))]
    for limit in range(130, 400, 9):
        step = StepInput(
            window=tuple(window),
            system_count=1,
            summary=None,
            count=count,
            budget=Budget(limit=limit, reserved_output=0, occupancy=count(window)),
            ctx=ContextConfig(),
        )
        out = assemble(step, (OVERFLOW,))
        assert out.trimmed, "the prompt had to be trimmed"
        assert out.messages[:2] == tuple(window[:2]) and out.messages[-1] == window[-1]
        for before, msg in zip(out.messages, out.messages[1:], strict=False):
            if str(msg["content"]).startswith("Observation:"):
                assert before["role"] == "assistant", (limit, out.messages)
        # the task folded away (only steps after the system message): the latest step stays
        rest = (window[0], *window[2:])
        smaller = replace(step.budget, limit=limit - 20)
        out = assemble(replace(step, window=rest, budget=smaller), (OVERFLOW,))
        assert out.messages[-2:] == rest[-2:], (limit, out.messages)


def test_a_refusal_with_nothing_to_drop_names_one_size() -> None:
    """With no history to drop the assembled prompt is what would be sent: one number."""
    msgs = [system("s"), user(_words(5_000))]
    with pytest.raises(ContextLengthExceeded) as err:
        guard(msgs, count=count, limit=4_000, reserved_output=500, protected_head=1)
    assert f"needs about {count(msgs)} tokens" in str(err.value)
    assert "as assembled" not in str(err.value)


def test_a_refused_message_before_trimmed_rounds_is_counted_in_the_clients_list() -> None:
    """An agent loop's task stays while its older rounds are trimmed for good, so the prompt
    skips them: counted from the prompt's end the task would be the 5th message, which in
    the list the client sent is a tool result. ``positions`` (each message's place in that
    list, aligned at the end) name it where the client finds it."""
    msgs = [
        system(_words(10)),
        user(_words(500)),  # the task, position 1
        assistant_calls(("c5", "cat", {})),  # positions 2-7 were trimmed by earlier steps
        tool("c5", _words(20)),
        assistant_calls(("c6", "ls", {})),
        tool("c6", _words(20)),
    ]
    with pytest.raises(ContextLengthExceeded) as err:
        guard(
            msgs,
            count=count,
            limit=400,
            reserved_output=40,
            protected_head=1,
            trim_current_turn=True,
            positions=(0, 1, 8, 9, 10, 11),
        )
    assert "(the 11th message from the end, role user)" in str(err.value)
