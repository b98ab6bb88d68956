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
