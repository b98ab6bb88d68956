"""assemble(): stage order, trimmed indices, calibrated guard, /compact filtering."""

from __future__ import annotations

from proxy.cascade.pipeline import (
    STAGES,
    Stage,
    StepInput,
    assemble,
    compact_reply_text,
    drop_commands,
    is_compact_command,
    stages_for,
)
from proxy.cascade.tokens import effective_input_tokens
from proxy.cascade.types import TRIMMED, Budget, ContextLengthExceeded, StageResult
from proxy.config_context import ContextConfig
from tests.unit.cascade.summary_builders import (
    assistant,
    assistant_calls,
    count,
    system,
    tool,
    user,
)

OFF = ContextConfig.model_validate({"eviction": {"enabled": False}})


def _words(n: int) -> str:
    return "w" * (4 * n)


def _window(rounds: int) -> tuple[dict, ...]:
    out: list[dict] = [system(_words(10)), user(_words(10))]
    for i in range(rounds):
        out += [assistant_calls((f"c{i}", "cat", {})), tool(f"c{i}", _words(50))]
    return tuple(out)


def _step(window: tuple[dict, ...], limit: int, *, ratio: float = 1.0) -> StepInput:
    return StepInput(
        window=window,
        system_count=1,
        summary=None,
        count=count,
        budget=Budget(limit=limit, reserved_output=0, occupancy=count(window)),
        ctx=OFF,
        ratio=ratio,
    )


def test_assemble_reports_window_indices_the_guard_dropped() -> None:
    window = _window(10)  # ~530 tokens
    out = assemble(_step(window, 400))
    assert out.trimmed, "the guard had to trim"
    kept = set(map(id, out.messages))
    assert all(id(window[i]) not in kept for i in out.trimmed)
    assert {id(m) for i, m in enumerate(window) if i not in out.trimmed} == kept
    assert any(e.name == TRIMMED for e in out.events)
    assert out.tokens <= int(400 * 0.6) + 60  # down to the low watermark, not just under 400


def test_assemble_counts_the_guard_with_the_calibrated_ratio() -> None:
    """An estimator that undercounts by 1.5x must not let an over-limit prompt through."""
    window = _window(6)  # ~330 estimated tokens, ~500 real
    assert not assemble(_step(window, 400)).trimmed
    assert assemble(_step(window, 400, ratio=1.5)).trimmed


def test_assemble_refuses_when_one_message_is_too_big() -> None:
    window = (system(_words(10)), user(_words(1000)))
    try:
        assemble(_step(window, 500))
    except ContextLengthExceeded as exc:
        assert "largest message" in str(exc)
    else:
        raise AssertionError("expected ContextLengthExceeded")


def test_compact_command_exchanges_never_reach_the_prompt() -> None:
    reply = compact_reply_text(version=2, folded=10, tokens_before=900, tokens_after=300, reason="")
    msgs = [
        system("s"),
        user("task"),
        assistant("a"),
        user("/compact"),
        {"role": "assistant", "content": reply},
        user("next"),
    ]
    assert is_compact_command(msgs[:4])
    assert not is_compact_command(msgs)
    assert drop_commands(msgs) == (msgs[0], msgs[1], msgs[2], msgs[5])


def test_a_message_that_only_mentions_compact_is_kept() -> None:
    msgs = [user("please /compact later"), assistant("ok")]
    assert drop_commands(msgs) == tuple(msgs)
    assert not is_compact_command(msgs[:1])


def test_occupancy_moves_the_real_count_by_the_estimated_change() -> None:
    assert effective_input_tokens(1200, ratio=1.5, last_real=3000, last_estimate=1000) == 3300
    assert effective_input_tokens(1200, ratio=1.5, last_real=None, last_estimate=None) == 1800
    # a compaction shrank the prompt since: occupancy falls with it, never below zero
    assert effective_input_tokens(200, ratio=1.0, last_real=3000, last_estimate=9000) == 0


EVICTING = ContextConfig.model_validate(
    {
        "eviction": {
            "atFraction": 0.1,
            "keepRecentRounds": 1,
            "clearAtLeast": 10,
            "minResultTokens": 10,
        },
    }
)


def _rounds(n: int, size: int) -> list[dict]:
    out: list[dict] = []
    for i in range(n):
        out += [assistant_calls((f"c{i}", "cat", {})), tool(f"c{i}", _words(size))]
    return out


def test_marks_reach_the_shell_as_window_indices_through_dropped_commands() -> None:
    """A /compact exchange before the evicted results and a summary folded in shift the
    prompt's indices; the marks still name the right window messages."""
    reply = compact_reply_text(version=1, folded=2, tokens_before=9, tokens_after=3, reason="")
    window = (
        system(_words(5)),
        user("/compact"),
        {"role": "assistant", "content": reply},
        user(_words(5)),
        *_rounds(3, 400),
    )
    step = StepInput(
        window=window,
        system_count=1,
        summary="the story so far",
        count=count,
        budget=Budget(limit=10_000, reserved_output=0, occupancy=5000),
        ctx=EVICTING,
    )
    out = assemble(step)
    assert out.evicted == (5, 7)  # the two older results, by window index
    assert all(out.window[i]["content"].startswith("[context-cleared]") for i in out.evicted)
    assert [window[i]["tool_call_id"] for i in out.evicted] == ["c0", "c1"]
    assert len(out.messages) == len(window) - 2 and not out.trimmed and not out.injected


def test_trimmed_marks_skip_the_commands_the_prompt_left_out() -> None:
    reply = compact_reply_text(version=1, folded=2, tokens_before=9, tokens_after=3, reason="")
    window = (
        system(_words(5)),
        user(_words(5)),
        user("/compact"),
        {"role": "assistant", "content": reply},
        *_rounds(10, 50),
    )
    out = assemble(
        StepInput(
            window=window,
            system_count=1,
            summary=None,
            count=count,
            budget=Budget(limit=400, reserved_output=0, occupancy=600),
            ctx=OFF,
        )
    )
    assert out.trimmed and min(out.trimmed) == 4  # the first round, after the exchange
    kept = [i for i in range(len(window)) if i not in (2, 3, *out.trimmed)]
    assert out.messages == tuple(window[i] for i in kept)


def test_an_inserted_summary_message_is_an_injected_block() -> None:
    window = (system("s"), assistant("a"), user("u"))
    step = StepInput(
        window=window,
        system_count=1,
        summary="briefing",
        count=count,
        budget=Budget(limit=10_000, reserved_output=0, occupancy=10),
        ctx=OFF,
    )
    out = assemble(step)
    assert out.injected == (1,) and out.messages[1]["role"] == "user"
    assert (out.messages[0], *out.messages[2:]) == window


def test_a_stage_that_changes_the_count_must_say_how() -> None:
    def sloppy(messages: tuple[dict, ...], step: StepInput) -> StageResult:
        return StageResult(messages[1:])

    step = _step(_window(1), 10_000)
    try:
        assemble(step, (Stage("sloppy", sloppy),))  # type: ignore[arg-type]
    except ValueError as exc:
        assert "sloppy" in str(exc)
    else:
        raise AssertionError("expected ValueError")


def test_the_config_chooses_the_stages() -> None:
    names = [s.name for s in stages_for(OFF)]
    assert names == ["observations", "commands", "summary", "overflow"]  # memory is opt-in
    assert [s.name for s in STAGES] == [
        "observations",
        "eviction",
        "commands",
        "summary",
        "memory",
        "retrieval",
        "recitation",
        "overflow",
    ]
    no_obs = ContextConfig.model_validate(
        {"eviction": {"enabled": False}, "observations": {"userPrefixes": []}}
    )
    assert [s.name for s in stages_for(no_obs)] == names[1:]
