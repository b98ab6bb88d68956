"""A tool result sent as content parts keeps its non-text parts when its text is rewritten.

A result of text and image parts (a browser tool's page text and screenshot) that was
compacted or cut at ingestion went upstream as a string of its rewritten text: the image
was gone from every later prompt, and ``read_tool_output`` reads back only text, so nothing
could bring it back. Now the rewritten text takes the place of the text parts and every
other part stays where it was; the text still reads back exactly.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import chat, history
from tests.integration.api.sessions_helpers import messages_of, settled
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob, read_all

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
TEXTS = {
    "compacted": "".join(["WARN retrying connection to db:5432\n"] * 300) + "done",
    "cut": blob(9000, "page"),
}
MARKS = {"compacted": "[compacted losslessly from ", "cut": "\n[... truncated "}


def tool_content(body: dict[str, Any]) -> Any:
    return next(m["content"] for m in body["messages"] if m["role"] == "tool")


@pytest.mark.parametrize("case", list(TEXTS))
@pytest.mark.parametrize("tools", [True, False], ids=["tools", "toolless"])
def test_the_image_part_of_a_rewritten_result_goes_upstream(
    proxy: ProxyServer, fake_upstream: FakeUpstream, case: str, tools: bool
) -> None:
    sid = f"media-{case}-{tools}"
    text = TEXTS[case]
    messages = history("call_page", text)
    messages[-1]["content"] = [{"type": "text", "text": text}, IMAGE]
    chat(proxy, sid, messages, **({} if tools else {"tools": None}))
    sent = tool_content(fake_upstream.bodies()[-1])
    assert isinstance(sent, list) and sent[1:] == [IMAGE], sent
    assert sent[0]["type"] == "text" and MARKS[case] in sent[0]["text"]
    assert ('read_tool_output({"id": "call_page@2"' in sent[0]["text"]) is tools
    assert len(sent[0]["text"]) < len(text)
    with api(proxy) as http:
        assert read_all(http, sid, "call_page") == text
    # Frozen at ingestion: the next request sends the same parts.
    chat(
        proxy,
        sid,
        [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}],
        **({} if tools else {"tools": None}),
    )
    assert tool_content(fake_upstream.bodies()[-1]) == sent


def test_the_image_part_of_a_rewritten_observation_goes_upstream(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    text = "Observation:\n" + TEXTS["compacted"]
    observation = {"role": "user", "content": [{"type": "text", "text": text}, IMAGE]}
    messages = [
        {"role": "user", "content": "New task:\nwhat does the page show?"},
        {"role": "assistant", "content": 'Calling tools:\n[{"name": "look", "arguments": {}}]'},
        observation,
        {"role": "assistant", "content": 'Calling tools:\n[{"name": "look", "arguments": {}}]'},
        {"role": "user", "content": "Observation:\nnothing new"},
    ]
    chat(proxy, "media-obs", messages)
    sent = fake_upstream.bodies()[-1]["messages"][2]["content"]
    assert isinstance(sent, list) and sent[1:] == [IMAGE], sent
    assert sent[0]["text"].startswith("Observation:\n[compacted losslessly from ")
    handle = re.search(r'read_tool_output\(\{"id": "(obs_[0-9a-f]+)"\}\)', sent[0]["text"])
    assert handle is not None
    with api(proxy) as http:
        assert read_all(http, "media-obs", handle[1]) == text


@pytest.mark.parametrize("case", list(TEXTS))
def test_a_rewritten_text_part_keeps_its_other_fields(
    proxy: ProxyServer, fake_upstream: FakeUpstream, case: str
) -> None:
    # A prompt-cache breakpoint (``cache_control``, which OpenRouter and LiteLLM pass on to
    # Anthropic) on a result's text part went with the part when the text was rewritten.
    text = TEXTS[case]
    messages = history("call_page", text)
    cache = {"type": "ephemeral"}
    messages[-1]["content"] = [{"type": "text", "text": text, "cache_control": cache}]
    chat(proxy, f"fields-{case}", messages)
    sent = tool_content(fake_upstream.bodies()[-1])
    assert isinstance(sent, list) and len(sent) == 1, sent
    assert sent[0]["cache_control"] == cache and MARKS[case] in sent[0]["text"]
    with api(proxy) as http:
        assert read_all(http, f"fields-{case}", "call_page") == text


@pytest.mark.parametrize("case", list(TEXTS))
def test_the_sent_form_of_a_rewritten_result_of_parts_is_its_parts(
    proxy: ProxyServer, fake_upstream: FakeUpstream, case: str
) -> None:
    # ``?form=sent`` (what the console resends) rebuilt such a result as its text alone, or
    # not at all, so a resent history read as an edited one.
    sid = f"sent-{case}"
    messages = history("call_page", TEXTS[case])
    messages[-1]["content"] = [{"type": "text", "text": TEXTS[case]}, IMAGE]
    chat(proxy, sid, messages)
    with api(proxy) as http:
        settled(http, sid, 4)
        sent = [r["message"] for r in messages_of(http, sid, form="sent")]
    assert sent[2]["content"] == messages[2]["content"]
