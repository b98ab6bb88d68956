"""Regression: with a tool call id reused within a session (``call_0`` every turn), the
``?form=sent`` messages gave an older cut result the newer result's text, since only the
newest spill under an id is in ``tool_raw_outputs``. The console resends that form as the
history, so it read as an edited history and superseded the stored tail. Each cut result
now comes back with its own text (the older one from ``tool_raw_output_versions``), in a
branch of the session too."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.api.sessions_helpers import (
    MAX_CHARS,
    chat,
    config_path,  # noqa: F401  (the module's config: a small maxChars)
    messages_of,
    settled,
    user,
)
from tests.integration.transcripts import blob

FIRST = blob(3000, "first")
SECOND = blob(3000, "second")


def _turn(tag: str, output: Any) -> list[dict[str, Any]]:
    call = {"id": "call_0", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
    return [
        user(f"read {tag}"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": output},
    ]


@pytest.mark.parametrize("parts", [False, True], ids=["text", "parts"])
def test_each_result_under_a_reused_id_comes_back_with_its_own_text(
    http: httpx.Client, parts: bool
) -> None:
    """Sent as a list of content parts, each comes back as its text (README)."""
    first: Any = [{"type": "text", "text": FIRST}] if parts else FIRST
    history = _turn("one", first)
    answer = chat(http, history, sid="reused").json()["choices"][0]["message"]
    settled(http, "reused", 4)
    history = [*history, answer, *_turn("two", SECOND)]
    chat(http, history, sid="reused")
    settled(http, "reused", 8)

    prompt = messages_of(http, "reused")
    assert [len(prompt[p]["message"]["content"]) <= MAX_CHARS for p in (2, 6)] == [True, True]
    sent = [r["message"] for r in messages_of(http, "reused", form="sent")]
    assert sent[2]["content"] == FIRST and sent[6]["content"] == SECOND
    # a branch keeps the replaced spill too, so its rows come back the same
    branch = http.post("/v1/sessions/reused/branch").json()["id"]
    assert [r["message"] for r in messages_of(http, branch, form="sent")] == sent
    if parts:
        return  # its sent form is its text, which the proxy takes for an edit (README)
    # resent in that form, the history extends the stored one: nothing is superseded
    chat(http, [*sent, user("and now?")], sid="reused")
    assert settled(http, "reused", 10)["superseded_count"] == 0
