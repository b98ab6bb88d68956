"""A client call's held fragments merged into one (``relay_calls.merged``) keep arguments a
provider sent as a JSON object: the client reads them, and resends them, as sent."""

from __future__ import annotations

from proxy.services.relay_calls import merged


def test_arguments_sent_as_an_object_survive_the_merge() -> None:
    args = {"path": "/tmp", "n": [1, 2.5]}
    parts = [
        {"index": 0, "id": "a", "type": "function"},
        {"index": 0, "function": {"arguments": args}},
        {"index": 0, "function": {"name": "grep"}},
    ]
    assert merged(parts) == {
        "index": 0,
        "id": "a",
        "type": "function",
        "function": {"arguments": args, "name": "grep"},
    }


def test_text_pieces_are_joined_as_before() -> None:
    parts = [
        {"index": 0, "function": {"arguments": '{"p":'}},
        {"index": 0, "id": "a", "function": {"name": "grep", "arguments": "1}"}},
    ]
    got = merged(parts)
    assert got["function"] == {"arguments": '{"p":1}', "name": "grep"}
