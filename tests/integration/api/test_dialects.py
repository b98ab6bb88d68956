"""Cascade in front of each OpenAI-compatible dialect users configure (tests/fakes/dialects.py),
with the openai SDK as the client and the provider configured as README says (``baseUrl`` up
to the dialect's path, ``apiKeyEnv``).

For every dialect: a plain and a streamed chat; the provider's prompt count learned from a
stream, whichever way it reports usage (or none, then the estimate); a tool loop whose result
is cut and read back with ``read_tool_output`` inside the request, streamed and not, sent back
in the form the dialect asks (DeepSeek's reasoning beside the call, Mistral's ids); and a
compaction's summary and memory promotion's extraction made to the same provider. Nothing the
proxy sends may be refused, except the one ``stream_options`` a strict server refuses once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.dialects import (
    AZURE_DEPLOYMENT,
    DIALECTS,
    FACT,
    KEY,
    REFUSE,
    Dialect,
    DialectUpstream,
    Turn,
    signature,
    tool_turn,
)
from tests.fakes.rendering import count_prompt_tokens
from tests.integration.api.compaction_stack import briefing, wait_until, words
from tests.integration.api.conftest import StartProxy
from tests.integration.transcripts import blob

CLIENT = "sk-test-client"
CID = "abcDEF123"  # a tool call id every dialect takes (Mistral: nine letters and digits)
READ = "rto123456"
_READ_FILE = {"name": "read_file", "arguments": "{}"}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}},
    }
]


@pytest.fixture(params=sorted(DIALECTS))
def dialect(request: pytest.FixtureRequest) -> Dialect:
    return DIALECTS[request.param]


@pytest.fixture
def fake(dialect: Dialect) -> Iterator[DialectUpstream]:
    with DialectUpstream(dialect, briefing=briefing()) as upstream:
        yield upstream


@pytest.fixture
def origin(
    fake: DialectUpstream, start_proxy: StartProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    monkeypatch.setenv("CASCADE_TEST_DIALECT_KEY", KEY)
    cfg = {
        "providers": {
            "p": {"baseUrl": fake.base_url, "apiKeyEnv": "CASCADE_TEST_DIALECT_KEY"},
        },
        "models": {
            "default": {"contextLimit": 4000, "reservedOutput": 500},
            "fast-model": {"contextLimit": 32000},
        },
        "agents": {"default": {"provider": "p", "fastModel": "fast-model"}},
        "context": {
            "toolOutput": {"maxChars": 2000},
            "eviction": {"enabled": False},
            "summarize": {"softFraction": 0.5, "keepRecent": 4},
            "memoryPromotion": {"mode": "auto"},
        },
    }
    path = tmp_path / "agents.json"
    path.write_text(json.dumps(cfg))
    return start_proxy(path).origin


def _sdk(origin: str, sid: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{origin}/s/{sid}/v1", api_key=CLIENT, max_retries=0)


def _view(origin: str, sid: str) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {CLIENT}"}
    got = httpx.get(f"{origin}/v1/sessions/{sid}", headers=headers, timeout=10).json()
    assert isinstance(got, dict)
    return got


def _strict_refusals(dialect: Dialect, fake: DialectUpstream) -> list[tuple[int, str]]:
    """The refusals the proxy drew, less the one a strict server gives ``stream_options``
    and the one of the extraction's ``response_format`` (DeepSeek's), which it asks again
    without."""
    said = [r for r in fake.refusals if "stream_options" not in r[1]]
    said = [r for r in said if "response_format" not in r[1]]
    if dialect.known is not None and "stream_options" not in dialect.known:
        assert len(fake.refusals) - len(said) <= 1, "stream_options was sent again after 422"
    return said


def test_plain_and_streamed_chat_and_the_usage_learned(
    dialect: Dialect, fake: DialectUpstream, origin: str
) -> None:
    client = _sdk(origin, f"plain-{dialect.name}")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello there " * 20}]
    fake.turns(Turn("hi, plain", reasoning="greet"), Turn("hi, streamed", reasoning="again"))
    whole = client.chat.completions.create(model="agent-model", messages=messages)
    assert whole.choices[0].message.content == "hi, plain"
    messages += [whole.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "user", "content": "and again " * 20}]
    stream = client.chat.completions.create(model="agent-model", messages=messages, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hi, streamed"
    assert all(c.usage is None for c in chunks if not c.choices) or dialect.usage == "beside"
    wait_until(lambda: _view(origin, f"plain-{dialect.name}")["message_count"] == 4)
    view = _view(origin, f"plain-{dialect.name}")
    sent = fake.chats()[-1].json["messages"]
    if dialect.usage == "never" or (dialect.known and "stream_options" not in dialect.known):
        assert view["last_prompt_tokens"] is None  # the calibrated estimate stands
    else:
        assert view["last_prompt_tokens"] == count_prompt_tokens(sent)
    assert _strict_refusals(dialect, fake) == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_cut_result_read_back_inside_the_request(
    stream: bool, dialect: Dialect, fake: DialectUpstream, origin: str
) -> None:
    sid = f"tools-{dialect.name}-{stream}"
    history = [
        {"role": "user", "content": "look at the log"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": CID,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": CID, "content": blob(9000, "big")},
    ]
    if dialect.reasoning_field:  # as the SDK's message dump resends it
        history[1][dialect.reasoning_field] = "Read the log."
    if dialect.signed:
        history[1]["tool_calls"][0]["extra_content"] = signature(CID)
    fake.turns(
        tool_turn([(READ, "read_tool_output", {"id": CID, "offset": 0})], reasoning="Need it."),
        Turn("the log says ok", reasoning="Found it."),
    )
    answer = _sdk(origin, sid).chat.completions.create(
        model="agent-model", messages=history, tools=TOOLS, stream=stream
    )
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
    else:
        text = answer.choices[0].message.content or ""  # type: ignore[union-attr]
    assert text.endswith("the log says ok")
    first, second = (r.json for r in fake.chats()[-2:])
    assert len(first["messages"][-1]["content"]) < 9000, "the result went whole"
    call_msg, result = second["messages"][-2:]
    assert [c["id"] for c in call_msg["tool_calls"]] == [READ]
    assert result["tool_call_id"] == READ and "big:00000" in result["content"]
    if dialect.reasoning_field:
        assert call_msg.get(dialect.reasoning_field) == "Need it."
    if dialect.signed:
        assert call_msg["tool_calls"][0]["extra_content"] == signature(READ)
    assert _strict_refusals(dialect, fake) == []


def test_the_summary_and_the_facts_are_asked_of_the_same_provider(
    dialect: Dialect, fake: DialectUpstream, origin: str
) -> None:
    sid = f"compact-{dialect.name}"
    client = _sdk(origin, sid)
    messages: list[dict[str, Any]] = []
    for i in range(5):  # the fifth crosses softFraction
        messages.append({"role": "user", "content": words(450, f"t{i}")})
        got = client.chat.completions.create(model="agent-model", messages=messages)
        messages.append({"role": "assistant", "content": got.choices[0].message.content})
    wait_until(lambda: _view(origin, sid).get("summary"), what="the summary")
    headers = {"authorization": f"Bearer {CLIENT}"}

    def facts() -> list[str]:
        got = httpx.get(f"{origin}/v1/memory", headers=headers, timeout=10).json()
        return [f["text"] for f in got.get("data") or []]

    wait_until(lambda: FACT in facts(), what="the promoted fact")
    fast = [r.json for r in fake.chats() if r.json.get("model") == "fast-model"]
    assert fast, "no summary call reached the provider"
    assert _strict_refusals(dialect, fake) == []


@pytest.mark.parametrize("when", ["at_once", "late"])
def test_the_providers_refusal_reaches_the_client_as_the_sdk_reads_it(
    when: str, dialect: Dialect, fake: DialectUpstream, origin: str
) -> None:
    """A refusal before anything went out is relayed as it came (Gemini's list of one error
    too), whole or streamed; one after the keep-alive committed the stream's 200 is an
    OpenAI-shaped error frame naming the provider's status and words."""
    said = REFUSE if when == "at_once" else f"{REFUSE} late"
    client = _sdk(origin, f"refused-{dialect.name}-{when}")
    messages = [{"role": "user", "content": said}]
    if when == "at_once":
        with pytest.raises(openai.BadRequestError) as whole:
            client.chat.completions.create(model="agent-model", messages=messages)
        direct = fake.refusals[-1][1]
        assert whole.value.response.json() == json.loads(direct)
        with pytest.raises(openai.BadRequestError):
            list(
                client.chat.completions.create(model="agent-model", messages=messages, stream=True)
            )
        return
    stream = client.chat.completions.create(model="agent-model", messages=messages, stream=True)
    with pytest.raises(openai.APIError) as late:
        list(stream)
    assert not isinstance(late.value, openai.APIStatusError)  # the 200 went out before it
    assert late.value.code == "400" and "Invalid value for" in late.value.message


def test_azure_deployment_paths_with_the_clients_entra_token_and_api_version(
    start_proxy: StartProxy, tmp_path: Path
) -> None:
    """README, "Providers' dialects": no ``apiKeyEnv``, the client's bearer (an Entra ID
    token) and its ``api-version`` as an ``extra_query`` reach every call, a compaction's
    summary and its facts included."""
    with DialectUpstream(AZURE_DEPLOYMENT, briefing=briefing()) as fake:
        cfg = {
            "providers": {"azure": {"baseUrl": fake.base_url}},
            "models": {"default": {"contextLimit": 4000, "reservedOutput": 500}},
            "agents": {"default": {"provider": "azure", "fastModel": "fast-model"}},
            "context": {
                "eviction": {"enabled": False},
                "summarize": {"softFraction": 0.5, "keepRecent": 4},
                "memoryPromotion": {"mode": "auto"},
            },
        }
        path = tmp_path / "agents.json"
        path.write_text(json.dumps(cfg))
        origin = start_proxy(path).origin
        client = openai.OpenAI(
            base_url=f"{origin}/s/azure-entra/v1",
            api_key=KEY,
            default_query={"api-version": "2024-10-21"},
            max_retries=0,
        )
        messages: list[dict[str, Any]] = []
        for i in range(5):  # the fifth crosses softFraction
            messages.append({"role": "user", "content": words(450, f"t{i}")})
            stream = i % 2 == 1
            got = client.chat.completions.create(model="gpt-4o", messages=messages, stream=stream)
            text = (
                "".join(c.choices[0].delta.content or "" for c in got if c.choices)
                if stream
                else got.choices[0].message.content
            )
            messages.append({"role": "assistant", "content": text})
        wait_until(
            lambda: len([r for r in fake.chats() if r.json.get("model") == "fast-model"]) >= 2,
            5.0,
            "the summary and the facts",
        )
        assert fake.refusals == []


THINKER = "accounts/fireworks/models/qwen3-235b-a22b"
"""A thinking fast model at Fireworks: its summary's bound holds room to think, past the 4096
tokens Fireworks takes in an unstreamed call."""


def test_a_thinking_fast_model_past_the_unstreamed_bound_is_asked_streamed(
    start_proxy: StartProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fireworks refuses an unstreamed call bounded past 4096 tokens ("must have
    stream=true"): the summary and the facts are asked again streamed, once each."""
    monkeypatch.setenv("CASCADE_TEST_DIALECT_KEY", KEY)
    dialect = DIALECTS["fireworks"]
    with DialectUpstream(dialect, fast=THINKER, briefing=briefing()) as fake:
        cfg = {
            "providers": {"p": {"baseUrl": fake.base_url, "apiKeyEnv": "CASCADE_TEST_DIALECT_KEY"}},
            "models": {
                "default": {"contextLimit": 4000, "reservedOutput": 500},
                THINKER: {"contextLimit": 131072},
            },
            "agents": {"default": {"provider": "p", "fastModel": THINKER}},
            "context": {
                "eviction": {"enabled": False},
                "summarize": {"softFraction": 0.5, "keepRecent": 4},
                "memoryPromotion": {"mode": "auto"},
            },
        }
        path = tmp_path / "agents.json"
        path.write_text(json.dumps(cfg))
        origin = start_proxy(path).origin
        sid = "fireworks-thinker"
        client = _sdk(origin, sid)
        messages: list[dict[str, Any]] = []
        for i in range(5):  # the fifth crosses softFraction
            messages.append({"role": "user", "content": words(450, f"t{i}")})
            got = client.chat.completions.create(model="agent-model", messages=messages)
            messages.append({"role": "assistant", "content": got.choices[0].message.content})
        wait_until(lambda: _view(origin, sid).get("summary"), what="the summary")
        headers = {"authorization": f"Bearer {CLIENT}"}

        def facts() -> list[str]:
            got = httpx.get(f"{origin}/v1/memory", headers=headers, timeout=10).json()
            return [f["text"] for f in got.get("data") or []]

        wait_until(lambda: FACT in facts(), what="the promoted fact")
        fast = [r.json for r in fake.chats() if r.json.get("model") == THINKER]
        # the summary's call is refused unstreamed and asked again streamed; the need is
        # learned, so the promotion's call streams from the first
        assert [bool(b.get("stream")) for b in fast] == [False, True, True]
        assert all(b["max_tokens"] > 4096 for b in fast)  # the room to think is kept
        assert [status for status, _ in fake.refusals] == [400]


def test_a_stream_the_provider_breaks_off_with_an_error_stores_no_reply(
    dialect: Dialect, fake: DialectUpstream, origin: str
) -> None:
    """The SDK raises on the provider's error event mid-stream, after the text before it;
    no reply is stored, so the client's retry is the same turn and its answer is stored."""
    sid = f"broken-{dialect.name}"
    client = _sdk(origin, sid)
    messages = [{"role": "user", "content": "tell me"}]
    fake.turns(Turn("half an answer", fails=True), Turn("the whole answer"))
    seen = []
    stream = client.chat.completions.create(model="agent-model", messages=messages, stream=True)
    with pytest.raises(openai.APIError, match="Provider disconnected"):
        for chunk in stream:
            seen += [chunk.choices[0].delta.content or ""] if chunk.choices else []
    assert "".join(seen) == "half an answer"
    again = client.chat.completions.create(model="agent-model", messages=messages)
    assert again.choices[0].message.content == "the whole answer"
    wait_until(lambda: _view(origin, sid)["message_count"] == 2, what="the retry's reply")
    headers = {"authorization": f"Bearer {CLIENT}"}
    stored = httpx.get(f"{origin}/v1/sessions/{sid}/messages", headers=headers, timeout=10)
    said = [m["message"].get("content") for m in stored.json()["data"]]
    assert said == ["tell me", "the whole answer"]
