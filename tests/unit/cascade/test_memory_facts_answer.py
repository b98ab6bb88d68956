"""``parse_facts``: the fast model's ``{"facts": [...]}`` is read as providers send it.

Servers that take ``response_format`` loosely (a local model behind Ollama or llama.cpp,
a reasoning model) wrap the object in a code fence, put a sentence or a thought before it:
the briefing's parser reads through those, and the facts' parser reads through them too,
where it refused the whole extraction as "not JSON"."""

from __future__ import annotations

import json

import pytest

from proxy.cascade.memory import FactsAnswerError, parse_facts

OBJECT = json.dumps({"facts": ["The build uses uv", "The port is 8443"]})


@pytest.mark.parametrize(
    "answer",
    [
        OBJECT,
        f"```json\n{OBJECT}\n```",
        f"```\n{OBJECT}\n```\n",
        f"Here are the durable facts:\n\n{OBJECT}",
        f"<think>The user wants {{facts}}; the span names uv.</think>\n{OBJECT}",
    ],
    ids=["plain", "fenced-json", "fenced", "preamble", "thought"],
)
def test_the_facts_object_is_read_through_fences_and_preambles(answer: str) -> None:
    assert parse_facts(answer) == ["The build uses uv", "The port is 8443"]


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("", "empty"),
        ("I found no durable facts.", "not JSON"),
        ('["The build uses uv"]', "not an object"),
        ('{"items": ["The build uses uv"]}', "no 'facts' list"),
        ('```json\n{"facts": "The build uses uv"}\n```', "no 'facts' list"),
    ],
)
def test_an_answer_without_the_object_is_refused_saying_why(answer: str, says: str) -> None:
    with pytest.raises(FactsAnswerError, match=says):
        parse_facts(answer)


def test_non_string_facts_are_left_out() -> None:
    assert parse_facts('{"facts": [1, null, {"a": 1}, "Kept"]}') == ["Kept"]


@pytest.mark.parametrize("opened", ["<think>", ""], ids=["thought", "opened-in-prompt"])
def test_a_draft_in_the_thought_is_not_the_answer(opened: str) -> None:
    """A thinking model without a reasoning parser (asked again without ``response_format``)
    may draft the object in its thought, then answer another: the answer is the one after
    the thought, as the briefing's reader takes it (a chat template may open the block in
    the prompt, so the thought ends at a line that closes it)."""
    draft = json.dumps({"facts": ["The staging password is hunter2."]})
    said = f"{opened}\nA draft: {draft}. No: a password is a secret, not a fact.\n</think>\n"
    assert parse_facts(said + OBJECT) == ["The build uses uv", "The port is 8443"]


def test_a_draft_nested_past_the_recursion_limit_is_passed_over_for_the_object() -> None:
    """A draft nested 10,000 levels before the answer's object: reading it is a
    RecursionError, no ValueError, which ended the extraction; it is passed over as any
    draft that is no object with facts is, and a deep answer alone is "not JSON"."""
    deep = "[" * 10_000 + "]" * 10_000
    assert parse_facts(f'{{"draft": {deep}}}\n{OBJECT}') == json.loads(OBJECT)["facts"]
    with pytest.raises(FactsAnswerError, match="not JSON"):
        parse_facts(f'{{"facts": {deep}}}')
