"""Recitation: the summary's Open Tasks and Next Step recited at the tail of the prompt."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import replace

from proxy.cascade.briefing import parse_briefing
from proxy.cascade.overflow import calibrated_count
from proxy.cascade.pipeline import assemble
from proxy.cascade.recitation import plan_block, recite
from proxy.cascade.step import StepInput
from proxy.cascade.types import Budget
from proxy.config_context import ContextConfig
from tests.unit.cascade.summary_builders import (
    assistant,
    assistant_calls,
    count,
    system,
    tool,
    user,
)

ON = ContextConfig.model_validate({"recitation": {"enabled": True}, "eviction": {"enabled": False}})
SUMMARY = parse_briefing(
    "## Objective\nship it\n## Open Tasks\n- fix `a.py`\n- test\n## Next Step\nrun pytest"
)
PLAN = "<plan>\n## Open Tasks\n- fix `a.py`\n- test\n\n## Next Step\nrun pytest\n</plan>"


def _step(
    window: tuple[dict, ...], summary: str | None = SUMMARY, ctx: ContextConfig = ON
) -> StepInput:
    return StepInput(
        window=window,
        system_count=1,
        summary=summary,
        count=count,
        budget=Budget(limit=100_000, reserved_output=0, occupancy=count(window)),
        ctx=ctx,
    )


def test_block_holds_both_sections() -> None:
    assert plan_block(SUMMARY) == PLAN


def test_one_section_alone_is_recited() -> None:
    only_next = parse_briefing("## Objective\nx\n## Next Step\nrun pytest")
    assert plan_block(only_next) == "<plan>\n## Next Step\nrun pytest\n</plan>"


def test_a_closing_tag_in_the_summary_does_not_end_the_block_early() -> None:
    """A task that quotes ``</plan>`` (a template, an XML file) would close the block early,
    leaving the rest of the plan outside it; it is quoted as ``</plan-text>``, as retrieval
    quotes its own closing tag."""
    quoting = parse_briefing("## Objective\nx\n## Next Step\nfix the `</plan>` tag in page.html")
    block = plan_block(quoting)
    assert block == "<plan>\n## Next Step\nfix the `</plan-text>` tag in page.html\n</plan>"
    assert block.count("</plan>") == 1


def test_a_closing_tag_in_any_spelling_does_not_end_the_block_early() -> None:
    """A model reads ``</PLAN>``, ``</ plan >`` or a fullwidth one as the block's end too."""
    quoting = parse_briefing(
        "## Objective\nx\n## Next Step\nfix `</PLAN>`, `</ plan >`, `＜／ｐｌａｎ＞` in page.html"
    )
    block = plan_block(quoting)
    assert block is not None
    assert re.findall(r"(?i)<\s*/\s*plan\s*>", unicodedata.normalize("NFKC", block)) == ["</plan>"]
    assert block.endswith("\n</plan>") and "page.html" in block


def test_no_block_without_summary_or_with_both_sections_empty() -> None:
    assert plan_block(None) is None
    assert plan_block(parse_briefing("## Objective\nx\n## Open Tasks\n(none)")) is None


def test_a_section_that_says_none_in_other_words_is_empty() -> None:
    """The fast model is asked for "(none)" and often writes "- None" or "N/A": a plan of
    such sections tells the model nothing at the tail of every step."""
    for empty in ("None", "- None", "none.", "- (none)", "N/A", "* n/a", "Nothing."):
        both = parse_briefing(f"## Objective\nx\n## Open Tasks\n{empty}\n## Next Step\n{empty}")
        assert plan_block(both) is None, empty
        tasks = parse_briefing(f"## Objective\nx\n## Open Tasks\n{empty}\n## Next Step\nrun it")
        assert plan_block(tasks) == "<plan>\n## Next Step\nrun it\n</plan>", empty
    kept = parse_briefing("## Objective\nx\n## Open Tasks\n- None of the tests pass yet")
    assert plan_block(kept) == "<plan>\n## Open Tasks\n- None of the tests pass yet\n</plan>"


def test_the_block_is_appended_to_a_final_user_message() -> None:
    window = (system("s"), user("start"), assistant("ok"), user("go on"))
    out = assemble(_step(window))
    assert out.messages[-1]["content"] == "go on\n\n" + PLAN
    assert out.window == window and out.evicted == () and out.injected == ()


def test_a_prompt_ending_with_tool_results_gets_it_in_the_last_tool_message() -> None:
    window = (system("s"), user("do"), assistant_calls(("c1", "cat", {})), tool("c1", "out"))
    out = assemble(_step(window))
    assert out.messages[-1]["role"] == "tool"
    assert out.messages[-1]["content"] == "out\n\n" + PLAN
    assert all(PLAN not in str(m["content"]) for m in out.messages[:-1])


def _turn(block: str | None = PLAN) -> StepInput:
    """A step whose turn's plan block is ``block`` (as ``assemble`` hands it to the stage)."""
    return replace(_step(()), answers={"recitation": block})


def test_list_content_gets_an_extra_text_part() -> None:
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    res = recite((system("s"), {"role": "user", "content": parts}), _turn())
    assert res.messages[-1]["content"] == [*parts, {"type": "text", "text": PLAN}]


def test_never_into_a_system_or_assistant_message() -> None:
    for last in (system("s"), assistant("prefill")):
        msgs = (user("u"), last)
        assert recite(msgs, _turn()).messages == msgs


def test_the_stage_places_the_turns_block_not_the_current_summarys() -> None:
    msgs = (system("s"), user("u"))
    assert recite(msgs, _turn(None)).messages == msgs  # the turn began without a plan
    assert (
        recite(msgs, _turn("<plan>\nkept\n</plan>"))
        .messages[-1]["content"]
        .endswith("<plan>\nkept\n</plan>")
    )


def test_a_summary_replaced_mid_turn_renews_the_turns_plan() -> None:
    window = (system("s"), user("do"), assistant_calls(("c1", "cat", {})), tool("c1", "one"))
    first = assemble(_step(window))
    assert first.kept is not None and first.kept["recitation"] == PLAN
    later = window + (assistant_calls(("c2", "cat", {})), tool("c2", "two"))
    same = assemble(replace(_step(later), kept=first.kept))
    assert same.messages[-1]["content"] == "two\n\n" + PLAN and same.kept is None
    # a new summary rewrote the head of the prompt: the plan recited is the new one's, once
    newer = parse_briefing("## Objective\nx\n## Next Step\nsomething else")
    second = assemble(replace(_step(later, summary=newer), kept=first.kept))
    renewed = "<plan>\n## Next Step\nsomething else\n</plan>"
    assert second.messages[-1]["content"] == "two\n\n" + renewed
    assert PLAN not in str(second.messages) and second.kept is not None
    third = assemble(replace(_step((*later, tool("c2", "3")), summary=newer), kept=second.kept))
    assert third.messages[-1]["content"] == "3\n\n" + renewed and third.kept is None


def test_one_long_tool_loop_recites_the_plan_of_its_first_summary() -> None:
    window = (system("task"), user("do"), assistant_calls(("c1", "cat", {})), tool("c1", "one"))
    first = assemble(_step(window, summary=None))
    assert first.messages[-1] == tool("c1", "one") and first.kept is not None
    later = window + (assistant_calls(("c2", "cat", {})), tool("c2", "two"))
    second = assemble(replace(_step(later), kept=first.kept))
    assert second.messages[-1]["content"] == "two\n\n" + PLAN


def test_a_turn_kept_before_its_summary_was_noted_keeps_its_plan() -> None:
    window = (system("s"), user("do"), assistant_calls(("c1", "cat", {})), tool("c1", "one"))
    newer = parse_briefing("## Objective\nx\n## Next Step\nsomething else")
    out = assemble(replace(_step(window, summary=newer), kept={"recitation": PLAN}))
    assert out.messages[-1]["content"] == "one\n\n" + PLAN  # noted now, renewed from the next


def test_off_by_default_and_a_no_op_without_summary() -> None:
    window = (system("s"), user("start"), assistant("ok"), user("go"))
    assert assemble(_step(window, ctx=ContextConfig())).messages[-1] == user("go")
    assert assemble(_step(window, summary=None)).messages[-1] == user("go")


def test_the_block_is_byte_identical_across_steps_and_rides_at_the_tail() -> None:
    window = (system("s"), user("do"), assistant_calls(("c1", "cat", {})), tool("c1", "one"))
    first = assemble(_step(window))
    later = window + (assistant_calls(("c2", "cat", {})), tool("c2", "two"))
    second = assemble(replace(_step(later)))
    assert first.messages[-1]["content"].endswith(PLAN)
    assert second.messages[-1]["content"].endswith(PLAN)
    assert second.messages[len(window) - 1]["content"] == "one"  # moved to the new end


def test_a_long_plan_is_cut_to_its_share_of_a_small_models_budget() -> None:
    """The plan repeats the summary; uncapped, a long one made the overflow guard drop the
    client's older rounds for good before it left the block out."""
    tasks = "\n".join(f"- task {k}: check case {k} of to_field" for k in range(150))
    summary = parse_briefing(f"## Objective\nx\n## Open Tasks\n{tasks}\n## Next Step\nrun tests")
    window = (system(), user("go on"))
    step = replace(_step(window, summary), budget=Budget(6000, 1000, 100))
    content = assemble(step).messages[-1]["content"]
    block = content[content.index("<plan>") :]
    assert block.startswith("<plan>\n## Open Tasks\n- task 0:") and block.endswith(
        "## Next Step\nrun tests\n</plan>"
    )
    assert "- task 149:" not in block and "more open task lines (see the summary)" in block
    assert len(block) // 4 <= 500  # a tenth of the budget, as the step counts
    assert plan_block(summary) is not None and "- task 149:" in str(plan_block(summary))


def test_a_plan_whose_next_step_alone_does_not_fit_is_not_recited() -> None:
    summary = parse_briefing("## Objective\nx\n## Next Step\n" + "word " * 400)
    window = (system(), user("go on"))
    step = replace(_step(window, summary), budget=Budget(6000, 1000, 100))
    assert "<plan>" not in assemble(step).messages[-1]["content"]


def test_the_next_step_stays_when_it_alone_fits_but_not_the_line_counting_the_tasks() -> None:
    """Cutting every open task still leaves the line saying how many there are; a cap that
    holds the next step but not that line recites the next step, which always stays."""
    summary = parse_briefing("## Objective\nx\n## Open Tasks\n- a\n## Next Step\nrun tests")
    alone = "<plan>\n## Next Step\nrun tests\n</plan>"
    assert plan_block(summary, max_tokens=len(alone), tokens=len) == alone


def test_the_cap_counts_the_plan_as_the_guard_counts_it() -> None:
    """The budget is the provider's tokens, which the guard reads as the estimate times the
    session's real/estimated ratio: a plan the raw estimate fits to a tenth costs a session
    whose tokens run twice the estimate a fifth of it."""
    tasks = "\n".join(f"- task {k}: check case {k} of to_field" for k in range(150))
    summary = parse_briefing(f"## Objective\nx\n## Open Tasks\n{tasks}\n## Next Step\nrun tests")
    window = (system(), user("go on"))
    step = replace(_step(window, summary), budget=Budget(6000, 1000, 100), ratio=2.0)
    content = assemble(step).messages[-1]["content"]
    block = content[content.index("<plan>") :]
    framing = calibrated_count(count, 2.0)([user("")])
    assert calibrated_count(count, 2.0)([user(block)]) - framing <= 500


def test_the_cut_is_found_in_a_few_counts() -> None:
    """Each count reads the whole block: trying one cut after another costs the square of
    a long task list on every turn's first step, with a small model's cap."""
    tasks = "\n".join(f"- task {k}: check case {k} of to_field" for k in range(256))
    summary = parse_briefing(f"## Objective\nx\n## Open Tasks\n{tasks}\n## Next Step\nrun tests")
    calls: list[int] = []

    def tokens(text: str) -> int:
        calls.append(len(text))
        return len(text) // 4

    block = plan_block(summary, max_tokens=300, tokens=tokens)
    assert block is not None and len(block) // 4 <= 300 and len(calls) <= 12, len(calls)
    kept = block.count("\n- task ")
    more = plan_block(summary, max_tokens=300, tokens=lambda t: len(t) // 4)
    assert more == block and f"and {256 - kept} more open task lines" in block
    cut = 256 - kept
    one_more = f"- task {kept}: check case {kept} of to_field\n- … and {cut - 1} more"
    longer = block.replace(f"- … and {cut} more", one_more)
    assert len(longer) // 4 > 300  # the fewest lines cut that fit


def test_a_client_resending_the_prompt_it_was_sent_holds_one_plan() -> None:
    """A client that resends the prompt it was sent holds a recited plan in each message that
    was the tail at a step (this turn's or an earlier turn's): the prompt recites one, at the
    tail, so the history does not grow by a plan a step."""
    old = "<plan>\n## Next Step\nread a.py\n</plan>"
    window = (system("s"), user("look\n\n" + old), assistant("ok"), user("do\n\n" + PLAN))
    window += (assistant_calls(("c1", "cat", {})), tool("c1", "one\n\n" + PLAN))
    window += (assistant_calls(("c2", "cat", {})),)
    window += ({"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": PLAN}]},)
    out = assemble(_step(window))
    assert out.messages[1]["content"].endswith("</conversation_summary>\n\nlook")
    assert out.messages[3]["content"] == "do"
    assert out.messages[5]["content"] == "one"
    assert out.messages[-1]["content"] == [{"type": "text", "text": PLAN}]
    assert out.window == window  # the client's text is stored as sent


def test_a_plan_of_the_clients_own_stays() -> None:
    own = ("plan:\n<plan>\nmine\n</plan>", "x\n\n<plan>\n## Next Step\nmine\n</plan>\n")
    for text in own:
        window = (system("s"), user(text), assistant("ok"), user("go on"))
        assert assemble(_step(window)).messages[1]["content"].endswith("\n\n" + text)


def test_resent_plans_go_when_the_turn_recites_none() -> None:
    """A turn without a plan (none in the summary, or the guard left it out) sends none of
    the plans a view-resending client holds from earlier steps."""
    window = (system("s"), user("do"), assistant_calls(("c1", "cat", {})))
    window += (tool("c1", "one\n\n" + PLAN), assistant_calls(("c2", "cat", {})), tool("c2", "2"))
    assert recite(window, _turn(None)).messages[-3]["content"] == "one"


def test_the_latest_message_keeps_a_plan_the_user_wrote() -> None:
    """The latest message is what the client writes now (a resending client's blocks sit in
    the messages the proxy sent, never in it): a plan in it, even in the proxy's form, is the
    user's and reaches the model; only the turn's own block byte for byte is not doubled."""
    own = "my plan:\n\n<plan>\n## Next Step\nrewrite b.py first\n</plan>"
    for summary in (SUMMARY, None):
        out = assemble(_step((system("s"), user(own)), summary=summary))
        assert "rewrite b.py first" in out.messages[-1]["content"]
    again = assemble(_step((system("s"), user("do\n\n" + PLAN))))
    assert again.messages[-1]["content"].endswith("\n\ndo\n\n" + PLAN)


def test_a_session_without_a_summary_keeps_every_plan_its_user_wrote() -> None:
    """The proxy recites only a summary's plan: with none, no block in any message is one it
    rendered, so a plan in the proxy's form that the user wrote earlier stays too."""
    own = "my plan:\n\n<plan>\n## Next Step\nrewrite b.py first\n</plan>"
    window = (system("s"), user(own), assistant("ok"), user("go on"))
    out = assemble(_step(window, summary=None))
    assert out.messages[1]["content"] == own
    assert recite(window, replace(_step(window, summary=None), answers={})).messages == window


def test_the_turns_user_message_keeps_a_plan_the_user_wrote_through_the_tool_loop() -> None:
    """In an agent's tool loop the turn's user message is no longer the last, yet it is the
    client's new text of this turn, which the proxy sent only with the turn's own block: a
    plan in the proxy's form that the user ends it with reaches the model on every step;
    the turn's block, byte for byte (a resending client's), does not come twice."""
    own = "my plan:\n\n<plan>\n## Next Step\nrewrite b.py first\n</plan>"
    loop = (assistant_calls(("c1", "cat", {})), tool("c1", "out"))
    out = assemble(_step((system("s"), user(own), *loop)))
    assert out.messages[1]["content"].endswith("\n\n" + own)
    assert out.messages[-1]["content"] == "out\n\n" + PLAN
    resent = assemble(_step((system("s"), user("do\n\n" + PLAN), *loop)))
    assert resent.messages[1]["content"].endswith("</conversation_summary>\n\ndo")
    assert resent.messages[-1]["content"] == "out\n\n" + PLAN
