"""The search for the end of a fast model's thinking reads the answer once: each closing
tag line inside a code fence read every line before it again, so an answer of a few
thousand such lines (a session about think tags, or a conversation that asks the model for
them) held the event loop, every tenant's requests with it, for seconds per summary or
extraction."""

from __future__ import annotations

import time

from proxy.cascade.briefing import without_thinking


def test_closing_lines_in_a_fence_are_read_in_one_pass() -> None:
    fenced = "## Next Step\n```\n" + "</think>\n" * 6000 + "```\n"
    started = time.process_time()  # CPU time: a loaded machine's other work is not counted
    assert without_thinking(fenced) == fenced
    assert without_thinking(f"draft\n</think>\n{fenced}") == "\n" + fenced
    assert time.process_time() - started < 1.0  # the search was quadratic: seconds


def test_the_first_closing_line_outside_a_fence_still_ends_the_thinking() -> None:
    text = "draft\n```\n</think>\n```\nmore draft\r\n</thinking>  \n## Objective\nx"
    assert without_thinking(text) == "\n## Objective\nx"
    assert without_thinking("```\n~~~\n```\n</think>\nafter") == "```\n~~~\n```\n</think>\nafter"
