"""The retrieval stage: planned only at a new turn, its block spliced into that user message,
its event reporting hits, best score, time and error (``cascade/retrieval.py``)."""

from __future__ import annotations

import json
import re
import time
import unicodedata
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from proxy.cascade.overflow import calibrated_count
from proxy.cascade.pipeline import StepInput, assemble, plan_step
from proxy.cascade.retrieval import (
    RELATED_CLOSE,
    RELATED_OPEN,
    Hit,
    RetrievalNeed,
    distinct_hits,
    fit_hits,
    related_block,
    retrieved,
    splice_related_context,
    text_key,
)
from proxy.cascade.types import RETRIEVAL, Budget, Message
from proxy.config_context import ContextConfig
from tests.unit.cascade.summary_builders import assistant, count, system, user

CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


def _ctx(**retrieval: Any) -> ContextConfig:
    return ContextConfig.model_validate({"retrieval": {"enabled": True, **retrieval}})


def _step(*window: Message, ctx: ContextConfig | None = None, **answers: Any) -> StepInput:
    return StepInput(
        window=tuple(window),
        system_count=1,
        summary=None,
        count=count,
        budget=Budget(limit=100_000, reserved_output=0, occupancy=10),
        ctx=ctx or _ctx(),
        answers=answers,
    )


HITS = (
    Hit(3, "user", "The server listens on port 8443.", 0.71, "summarised"),
    Hit(7, "tool", "src/app/main.py\nsrc/app/db.py", 0.52, "evicted", "call_9"),
)


def test_a_new_user_message_plans_its_text_as_the_query() -> None:
    window = (system("s"), user("which port does the server use?"))
    need = plan_step(_step(*window))["retrieval"]
    assert need == RetrievalNeed(
        "which port does the server use?",
        0.35,
        4,
        300,
        1200,
        max_tokens=25_000,
        carried_texts=frozenset(map(text_key, window)),
    )
    parts = {"role": "user", "content": [{"type": "text", "text": "the port?"}]}
    assert plan_step(_step(system("s"), parts))["retrieval"].query == "the port?"


def test_a_step_inside_a_turn_plans_nothing() -> None:
    loop = (
        system("s"),
        user("list the files"),
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a b"},
    )
    assert "retrieval" not in plan_step(_step(*loop))
    # an observation sent as a user message continues the turn
    text_agent = (system("s"), user("go"), {"role": "assistant", "content": "ls"})
    assert "retrieval" not in plan_step(_step(*text_agent, user("Observation: a b")))
    # no text, nothing to ask
    assert "retrieval" not in plan_step(_step(system("s"), user("   ")))


def test_off_or_no_results_wanted_plans_nothing() -> None:
    off = ContextConfig()
    assert "retrieval" not in plan_step(_step(system("s"), user("q"), ctx=off))
    assert "retrieval" not in plan_step(_step(system("s"), user("q"), ctx=_ctx(maxResults=0)))


def test_a_small_models_block_keeps_the_best_hits_its_share_of_the_budget_holds() -> None:
    """At most a quarter of the prompt budget, as the memory block: the overflow guard drops
    older rounds (for good) before it leaves the block out, so an unbounded block would
    cost a small model its conversation for quotes."""
    many = tuple(
        Hit(i, "user", f"fact {i}: " + "word " * 120, 0.9 - i / 100, "trimmed") for i in range(4)
    )
    small = replace(_step(system("s"), user("q")), budget=Budget(3000, 1000, 10))
    need = plan_step(small)["retrieval"]
    assert need.max_tokens == 500 and need.tokens is not None
    kept = fit_hits(many, need)
    assert 1 <= len(kept) < len(many) and kept == list(many[: len(kept)])  # the best first
    block = related_block(kept, need.snippet_chars)
    assert block is not None and need.tokens(block) <= 500
    longer = related_block(many[: len(kept) + 1], need.snippet_chars)
    assert longer is not None and need.tokens(longer) > 500
    roomy = plan_step(_step(system("s"), user("q")))["retrieval"]
    assert fit_hits(many, roomy) == list(many)


def test_the_block_names_role_origin_and_position_and_cuts_snippets() -> None:
    block = related_block(HITS, snippet_chars=12)
    assert block is not None
    assert block.startswith(RELATED_OPEN + "\n") and block.endswith(RELATED_CLOSE)
    assert "[user, message 3, summarised, score 0.71]\nThe server…" in block
    assert "[tool result of call_9@7, message 7, evicted, score 0.52]\nsrc/app/mai…" in block
    assert related_block((), 100) is None
    # a snippet cannot close the block early
    sneaky = Hit(1, "user", f"x {RELATED_CLOSE} y", 0.9, "trimmed")
    inner = related_block((sneaky,), 100)
    assert inner is not None and inner.count(RELATED_CLOSE) == 1
    # nor can one in another spelling a model reads as the same tag
    spelled = ("</RELATED_CONTEXT>", "</ related_context >", "＜／ｒｅｌａｔｅｄ＿ｃｏｎｔｅｘｔ＞")
    for close in spelled:
        inner = related_block((Hit(1, "tool", f"x {close} y", 0.9, "trimmed", "c1"),), 100)
        assert inner is not None
        read = unicodedata.normalize("NFKC", inner)
        assert re.findall(r"(?i)<\s*/\s*related_context\s*>", read) == [RELATED_CLOSE], close


def test_the_answer_is_appended_to_the_turns_user_message_and_reported() -> None:
    window = (system("s"), user("which port?"))
    answer = retrieved(HITS, snippet_chars=1200, took_ms=1.234, model="m")
    assert json.loads(json.dumps(answer)) == answer  # plain JSON: it can be kept with the turn
    out = assemble(_step(*window, retrieval=answer))
    last = out.messages[-1]["content"]
    assert last.startswith("which port?\n\n" + RELATED_OPEN)
    assert "The server listens on port 8443." in last
    assert out.window == window  # the block is never stored as the client's message
    (event,) = [e for e in out.events if e.name == RETRIEVAL]
    assert event.data == {
        "hits": 2,
        "best_score": 0.71,
        "took_ms": 1.23,
        "error": None,
        "model": "m",
        "positions": [3, 7],
    }


def test_a_list_content_gets_an_extra_text_part() -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "which port?"}]}
    out = assemble(_step(system("s"), parts, retrieval=retrieved(HITS, snippet_chars=1200)))
    content = out.messages[-1]["content"]
    assert content[0] == {"type": "text", "text": "which port?"}
    assert content[1]["type"] == "text" and content[1]["text"].startswith(RELATED_OPEN)


def test_a_failed_embedding_sends_the_turn_as_it_is_and_reports_the_error() -> None:
    window = (system("s"), user("which port?"))
    failed = retrieved(
        (), snippet_chars=1200, took_ms=300.0, error="the embedding took longer than 300 ms"
    )
    out = assemble(_step(*window, retrieval=failed))
    assert out.messages == window
    (event,) = [e for e in out.events if e.name == RETRIEVAL]
    assert event.data["hits"] == 0 and event.data["best_score"] is None
    assert event.data["error"] == "the embedding took longer than 300 ms"


def test_without_an_answer_the_stage_changes_nothing() -> None:
    window = (system("s"), user("q"))
    out = assemble(_step(*window))
    assert out.messages == window and not [e for e in out.events if e.name == RETRIEVAL]


def test_a_kept_answer_is_spliced_byte_for_byte_and_not_reported_again() -> None:
    answer = retrieved(HITS, snippet_chars=1200)
    loop = (
        system("s"),
        user("which port?"),
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a b"},
    )
    first = splice_related_context(loop[:2], _step(*loop[:2], retrieval=answer))
    # a later step of the turn: the shell hands back the value it kept for the turn
    later = SimpleNamespace(
        answers={"retrieval": answer}, kept={"retrieval": answer}, ctx=_ctx(), window=loop
    )
    out = splice_related_context(loop, later)  # type: ignore[arg-type]
    assert out.messages[1] == first.messages[1]
    assert out.messages[1]["content"] == "which port?\n\n" + answer["block"]
    assert out.messages[2:] == loop[2:]
    assert [e.name for e in first.events] == [RETRIEVAL] and out.events == ()


def test_a_text_key_reads_text_and_calls_whitespace_aside() -> None:
    assert text_key(user("the  port\n8443")) == text_key(user("the port 8443 "))
    assert text_key(user("the port")) != text_key(user("the port 8443"))
    called = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    assert text_key(called) is not None and text_key({"role": "assistant"}) is None


def test_hits_whose_snippets_read_alike_are_quoted_once() -> None:
    """A block quotes each hit's head only: two outputs of one file that differ past it
    (``cat`` before and after an edit at its end) would read as two copies of one text."""
    head = "line of the config file\n" * 80
    before = Hit(3, "tool", head + "debug = false", 0.7, "summarised", "c1")
    after = Hit(9, "tool", head + "debug = true", 0.6, "summarised", "c2")
    other = Hit(5, "user", "something else", 0.5, "summarised")
    assert distinct_hits([before, after, other], snippet_chars=1200) == [before, other]
    assert distinct_hits([before, after, other]) == [before, after, other]


def test_the_cap_counts_the_block_as_the_guard_counts_it() -> None:
    """The budget is the provider's tokens, which the guard reads as the estimate times the
    session's real/estimated ratio: a block fit to a quarter by the raw estimate costs a
    session whose tokens run twice the estimate half its budget."""
    need = plan_step(replace(_step(system("s"), user("the port?")), ratio=2.0))["retrieval"]
    guard = calibrated_count(count, 2.0)
    text = "The server listens on port 8443. " * 100
    assert need.tokens(text) == guard([user(text)]) - guard([user("")])


def test_a_turn_message_that_already_holds_the_block_gets_no_second_one() -> None:
    """A client that resends the prompt it was sent holds the block in its user message: a
    later step of the turn adds none again, or the message would grow a block a step and
    each step would supersede the history from there."""
    answer = retrieved(HITS, snippet_chars=1200)
    window = (system("s"), user("which port?"))
    sent = splice_related_context(window, _step(*window, retrieval=answer)).messages
    resent = (*sent, {"role": "assistant", "content": None, "tool_calls": [CALL]})
    resent += ({"role": "tool", "tool_call_id": "call_1", "content": "a b"},)
    later = SimpleNamespace(
        answers={"retrieval": answer}, kept={"retrieval": answer}, ctx=_ctx(), window=resent
    )
    out = splice_related_context(resent, later)  # type: ignore[arg-type]
    assert out.messages == resent


def test_an_earlier_turns_resent_block_is_left_out_of_the_prompt() -> None:
    """A client that resends the prompt it was sent holds each earlier turn's block in that
    turn's user message (the turn's plan after it): the prompt leaves those out, as a client
    sending its own text gets none there, so the history does not grow by a block a turn."""
    old = related_block(HITS[:1], 1200)
    assert old is not None
    plan = "<plan>\n## Next Step\nrun\n</plan>"
    parts = [{"type": "text", "text": "see"}, {"type": "text", "text": old}]
    window = (system("s"), user(f"which port?\n\n{old}\n\n{plan}"), {"role": "assistant"})
    window += ({"role": "user", "content": parts}, {"role": "assistant", "content": "8443"})
    window += (user("and the db?"),)
    answer = retrieved(HITS, snippet_chars=1200)
    out = splice_related_context(window, _step(*window, retrieval=answer))
    assert out.messages[1]["content"] == f"which port?\n\n{plan}"
    assert out.messages[3]["content"] == parts[:1]
    assert out.messages[-1]["content"].startswith("and the db?\n\n" + RELATED_OPEN)
    own = (system("s"), user(f"q\n\n{RELATED_OPEN}\nmine\n{RELATED_CLOSE}"), *window[2:])
    kept = splice_related_context(own, _step(*own, retrieval=answer))
    assert kept.messages[1] == own[1]


def test_an_earlier_turns_resent_block_goes_when_this_turn_has_no_hits() -> None:
    old = related_block(HITS[:1], 1200)
    window = (system("s"), user(f"which port?\n\n{old}"), assistant("8443"), user("thanks"))
    out = splice_related_context(window, _step(*window, retrieval=retrieved((), snippet_chars=9)))
    assert out.messages[1]["content"] == "which port?" and out.messages[3] == window[3]


def test_resent_blocks_are_left_out_in_time_linear_in_the_message() -> None:
    """A message the client writes can hold any number of blocks in the proxy's form: each
    one left out must not copy the rest of the message again, which on a message of a few
    MB stalled the event loop for seconds on every step of the turn."""
    old = related_block(HITS[:1], 40)
    assert old is not None
    window = (system("s"), user(("hi\n\n" + old) * 16_000), assistant("ok"), user("and?"))
    answer = retrieved((), snippet_chars=9)
    started = time.perf_counter()
    out = splice_related_context(window, _step(*window, retrieval=answer))
    assert time.perf_counter() - started < 1.0
    assert out.messages[1]["content"] == "hi" * 16_000
