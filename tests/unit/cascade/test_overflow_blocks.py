"""The overflow guard leaves out the optional per-turn blocks before it refuses a prompt."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from proxy.cascade.commands import COMMANDS, compact_reply_text
from proxy.cascade.memory_block import MEMORY, render_memory
from proxy.cascade.overflow import OVERFLOW, calibrated_count
from proxy.cascade.pipeline import StepInput, assemble
from proxy.cascade.recitation import RECITATION
from proxy.cascade.retrieval import RETRIEVAL_STAGE
from proxy.cascade.summary import SUMMARY
from proxy.cascade.types import TRIMMED, Budget, ContextLengthExceeded
from proxy.config_context import ContextConfig
from tests.unit.cascade.summary_builders import (
    assistant,
    assistant_calls,
    count,
    system,
    tool,
    user,
)

CTX = ContextConfig.model_validate(
    {
        "eviction": {"enabled": False},
        "retrieval": {"enabled": True},
        "recitation": {"enabled": True},
        "memoryPromotion": {"mode": "suggest"},
    }
)
STAGES = (MEMORY, RETRIEVAL_STAGE, RECITATION, OVERFLOW)
RELATED = "<related_context>\n" + "r" * 1600 + "\n</related_context>"  # ~400 tokens
PLAN = "<plan>\n## Next Step\n" + "p" * 400 + "\n</plan>"  # ~100 tokens
MEMORY_BLOCK = "<memory>\n" + "m" * 400 + "\n</memory>"  # ~100 tokens
KEPT = {
    "retrieval": {"block": RELATED, "hits": 1},
    "recitation": PLAN,
    "recitation:of": "",  # made with no summary, as the steps here have
    "memory": MEMORY_BLOCK,
}


def _window(current: int = 1200) -> tuple[dict[str, Any], ...]:
    return (system("s" * 40), user("u" * 160), assistant("a" * 40), user("c" * current))


def _step(window: tuple[dict[str, Any], ...], limit: int, kept: Any = None) -> StepInput:
    return StepInput(
        window=window,
        system_count=1,
        summary=None,
        count=count,
        budget=Budget(limit=limit, reserved_output=0, occupancy=count(window)),
        ctx=CTX,
        kept=KEPT if kept is None else kept,
    )


def _text(messages: Any) -> str:
    return "".join(str(m.get("content")) for m in messages)


def _trimmed(out: Any) -> dict[str, Any]:
    (event,) = [e for e in out.events if e.name == TRIMMED]
    return dict(event.data)


def test_blocks_that_fit_stay_and_older_history_goes_first() -> None:
    # 10 + 40 + 10 + 300 tokens of window, 600 of blocks: the old rounds make room
    out = assemble(_step(_window(), 1000), STAGES)
    assert all(block in _text(out.messages) for block in (RELATED, PLAN, MEMORY_BLOCK))
    assert out.trimmed == (1,)
    assert "dropped_blocks" not in _trimmed(out)
    assert out.kept is None  # the turn keeps its blocks


def test_the_retrieval_block_goes_before_the_request_is_refused() -> None:
    # with every block the floor is ~920 tokens; without the retrieval block ~520
    out = assemble(_step(_window(), 560), STAGES)
    text = _text(out.messages)
    assert RELATED not in text and PLAN in text and MEMORY_BLOCK in text
    assert out.messages[-1]["content"] == "c" * 1200 + "\n\n" + PLAN
    assert _trimmed(out)["dropped_blocks"] == ["retrieval"]
    assert out.kept is not None and out.kept["retrieval"] is None
    assert out.kept["recitation"] == PLAN and out.kept["memory"] == MEMORY_BLOCK


def test_the_turn_leaves_a_dropped_block_out_on_its_later_steps() -> None:
    first = assemble(_step(_window(), 560), STAGES)
    assert first.kept is not None
    later = (*_window(), assistant("a" * 40), user("next " * 4))
    out = assemble(_step(later, 100_000, kept=first.kept), STAGES)  # it would fit now
    assert RELATED not in _text(out.messages) and PLAN in _text(out.messages)


def test_plan_then_memory_go_only_when_still_needed() -> None:
    out = assemble(_step(_window(), 340), STAGES)
    assert _trimmed(out)["dropped_blocks"] == ["retrieval", "recitation", "memory"]
    w = _window()
    assert out.messages == (w[0], w[2], w[3])  # the client's text, byte for byte
    out = assemble(_step(_window(), 440), STAGES)
    assert _trimmed(out)["dropped_blocks"] == ["retrieval", "recitation"]
    assert MEMORY_BLOCK in _text(out.messages)


def test_memory_as_its_own_system_message_goes_whole() -> None:
    window = _window()[1:]
    step = StepInput(
        window=window,
        system_count=0,
        summary=None,
        count=count,
        budget=Budget(limit=340, reserved_output=0, occupancy=count(window)),
        ctx=CTX,
        kept=KEPT,
    )
    out = assemble(step, STAGES)
    assert out.messages == window[1:]
    assert out.trimmed == (0,)
    assert _trimmed(out)["dropped_blocks"] == ["retrieval", "recitation", "memory"]


def test_a_prompt_too_large_without_its_blocks_is_still_refused() -> None:
    """The refusal counts what would be sent with every block and all older history gone,
    and names the prompt as the stages assembled it, blocks and all, beside it."""
    step = _step(_window(), 300)
    with pytest.raises(ContextLengthExceeded) as err:
        assemble(step, STAGES)
    w, calibrated = _window(), calibrated_count(count, step.ratio)
    text = str(err.value)
    assert f"needs about {calibrated((w[0], w[3]))} tokens but 300 are available" in text
    blocks = (w[0], w[1], w[2], {**w[3], "content": w[3]["content"] + RELATED + PLAN})
    assembled = re.search(r"the prompt as assembled is (\d+)", text)
    assert assembled is not None and calibrated(blocks) < int(assembled[1])


def test_a_block_in_a_list_of_parts_goes_and_the_clients_parts_stay() -> None:
    parts = [{"type": "text", "text": "c" * 1200}, {"type": "image_url", "image_url": {"url": "x"}}]
    window = (*_window()[:3], user(parts))  # type: ignore[arg-type]
    out = assemble(_step(window, 600), STAGES)  # the count here reads a list's repr
    assert out.messages[-1]["content"] == [*parts, {"type": "text", "text": PLAN}]
    assert _trimmed(out)["dropped_blocks"] == ["retrieval"]


def test_a_refusal_names_the_task_where_the_client_finds_it_past_trimmed_rounds() -> None:
    """The window skips rounds earlier steps trimmed for good; the step's positions say
    where each message is in the client's list, so the task is not named as the 5th message
    from the end (a tool result there) but as the 11th."""
    window = (
        system("s" * 40),
        user("t" * 4000),  # the task, 1000 tokens
        assistant_calls(("c5", "cat", {})),  # positions 2-7 were trimmed by earlier steps
        tool("c5", "r" * 80),
        assistant_calls(("c6", "ls", {})),
        tool("c6", "r" * 80),
    )
    step = replace(_step(window, 900, kept={}), positions=(0, 1, 8, 9, 10, 11))
    with pytest.raises(ContextLengthExceeded) as err:
        assemble(step, STAGES)
    assert "(the 11th message from the end, role user)" in str(err.value)


def test_a_refusal_counts_past_a_compact_exchange_the_prompt_leaves_out() -> None:
    """A ``/compact`` exchange is in the window (and the client's list) but in no prompt:
    the task before it is still named where the client finds it."""
    window = (
        system("s" * 40),
        user("t" * 4000),  # the task, position 1
        user("/compact"),
        assistant(
            compact_reply_text(version=1, folded=0, tokens_before=0, tokens_after=0, reason="")
        ),
        assistant_calls(("c6", "ls", {})),
        tool("c6", "r" * 80),
    )
    step = replace(_step(window, 900, kept={}), positions=(0, 1, 2, 3, 4, 5))
    with pytest.raises(ContextLengthExceeded) as err:
        assemble(step, (COMMANDS, *STAGES))
    assert "(the 5th message from the end, role user)" in str(err.value)


def test_a_resent_memory_message_left_out_leaves_the_clients_oldest_message_droppable() -> None:
    """A view-resending client without a system prompt holds the proxy's memory message
    first; with no fact left to list the stage leaves it out, and the guard protects the
    head the prompt has then, not the window's: the client's oldest message was protected
    in its place, so a prompt that fits without it was refused."""
    window = (
        system(render_memory(["a fact since deleted"]) or ""),
        user("u" * 1600),  # the oldest message, 400 tokens
        assistant("a" * 40),
        user("c" * 1200),
    )
    out = assemble(_step(window, 500, kept={"memory": None}), STAGES)
    assert "u" * 1600 not in _text(out.messages) and "a fact" not in _text(out.messages)
    assert out.messages[-1] == window[-1]
    assert 1 in out.trimmed
    # after a compaction: the summary's own user message is the head, and the client's
    # oldest message after it goes as before
    window = (window[0], assistant("a" * 1600), window[3])
    step = replace(_step(window, 500, kept={"memory": None}), summary="## Objective\nship")
    out = assemble(step, (SUMMARY, *STAGES))
    assert "a" * 1600 not in _text(out.messages) and out.trimmed == (1,)
