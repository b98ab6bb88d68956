"""A ``read_tool_output`` call's arguments as a provider sent them: their JSON text, or the
object itself (some providers stream them so, and the reply holds them as sent)."""

from __future__ import annotations

import json

import pytest

from proxy.services.toolloop import _arguments


@pytest.mark.parametrize("args", [{"id": "c1", "offset": 5, "grep": "x"}])
def test_arguments_are_read_as_text_or_as_the_object_sent(args: dict[str, object]) -> None:
    for given in (json.dumps(args), args):
        assert _arguments({"function": {"name": "read_tool_output", "arguments": given}}) == (
            "c1",
            5,
            None,
            "x",
        )


def test_arguments_sent_as_an_array_are_unusable_not_a_crash() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        _arguments({"function": {"name": "read_tool_output", "arguments": ["c1"]}})
