"""Non-streaming chat through the real proxy: the official SDK gets the upstream's exact bytes.

Issue #2 item 2. Each case sends the same request twice to the fake upstream, once directly
with httpx and once through the proxy with the openai SDK, and compares the raw response bodies.
Replies carry fixed ids, so the fake's answer is a pure function of the request it received.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.replies import Reply, reply, tool_call
from tests.fakes.upstream import CHAT, FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, wait_for, write_config

CLIENT_KEY = "sk-test-client"
UPSTREAM_KEY_ENV = "CASCADE_TEST_UPSTREAM_KEY"
SESSION_A = {"X-Session-Id": "auth-a"}

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} for a place",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    for name in ("get_weather", "get_time")
]

CASES: dict[str, tuple[dict[str, Any], Reply]] = {
    "text": (
        {
            "model": "gpt-fake",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Say hello in French and Japanese."},
            ],
        },
        reply("Bonjour — こんにちは", id="chatcmpl-text"),
    ),
    "parallel_tool_calls": (
        {
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": "Weather and time in Paris?"}],
            "tools": WEATHER_TOOLS,
            "tool_choice": "auto",
            "parallel_tool_calls": True,
        },
        reply(
            None,
            tool_calls=[
                tool_call("get_weather", {"city": "Paris"}, id="call_weather"),
                tool_call("get_time", {"city": "Paris"}, id="call_time"),
            ],
            id="chatcmpl-tools",
        ),
    ),
    "content_parts": (
        {
            "model": "gpt-fake",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in this picture?"},
                        {
                            "type": "image_url",
                            "image_url": {
                                "url": "data:image/png;base64,iVBORw0KGgo=",
                                "detail": "low",
                            },
                        },
                    ],
                }
            ],
        },
        reply("A tiny transparent square.", id="chatcmpl-parts"),
    ),
    "n_and_logprobs": (
        {
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": "Pick a colour."}],
            "n": 2,
            "logprobs": True,
            "top_logprobs": 2,
        },
        reply("Blue, definitely blue.", id="chatcmpl-n2", chunks=4),
    ),
}


def _direct(fake: FakeUpstream, body: dict[str, Any]) -> httpx.Response:
    """The same request sent straight to the upstream, bypassing the proxy."""
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    return httpx.post(f"{fake.url}/chat/completions", json=body, headers=headers, timeout=10)


def test_nonstream_body_is_byte_for_byte_the_upstream_answer(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    for case, (body, scripted) in CASES.items():
        fake_upstream.script(scripted, scripted)
        direct = _direct(fake_upstream, body)
        assert direct.status_code == 200, case

        raw = client.chat.completions.with_raw_response.create(**body)

        assert raw.status_code == 200, case
        assert raw.content == direct.content, case
        assert raw.headers["content-type"] == direct.headers["content-type"], case
        assert raw.headers["x-session-id"], case
        # The SDK parses the relayed body like the upstream's own.
        expected = openai.types.chat.ChatCompletion.model_validate(direct.json())
        assert raw.parse().model_dump() == expected.model_dump(), case


def test_sdk_sees_parallel_tool_calls_n_choices_and_logprobs(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    tools_body, tools_reply = CASES["parallel_tool_calls"]
    n_body, n_reply = CASES["n_and_logprobs"]
    fake_upstream.script(tools_reply, n_reply)

    with_tools = client.chat.completions.create(**tools_body)
    with_n = client.chat.completions.create(**n_body)

    choice = with_tools.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = [
        (c.id, c.function.name, json.loads(c.function.arguments))
        for c in choice.message.tool_calls or []
    ]
    assert calls == [
        ("call_weather", "get_weather", {"city": "Paris"}),
        ("call_time", "get_time", {"city": "Paris"}),
    ]
    assert [c.index for c in with_n.choices] == [0, 1]
    for choice in with_n.choices:
        assert choice.logprobs is not None and choice.logprobs.content
        tokens = [t.token for t in choice.logprobs.content]
        assert "".join(tokens) == "Blue, definitely blue."
        assert all(len(t.top_logprobs) == 2 for t in choice.logprobs.content)


def test_reply_is_stored_in_the_session(
    client: openai.OpenAI, http: httpx.Client, fake_upstream: FakeUpstream
) -> None:
    body, scripted = CASES["parallel_tool_calls"]
    fake_upstream.script(scripted)

    raw = client.chat.completions.with_raw_response.create(**body)
    sid = raw.headers["x-session-id"]

    def stored() -> list[dict[str, Any]]:
        data = http.get(f"/v1/sessions/{sid}/messages").json().get("data") or []
        return data if len(data) == 2 else []

    rows = wait_for(stored)
    assert [r["role"] for r in rows] == ["user", "assistant"]
    assert rows[0]["message"] == body["messages"][0]
    calls = rows[1]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"]) for c in calls] == [
        ("call_weather", "get_weather"),
        ("call_time", "get_time"),
    ]


def test_sdk_configured_by_openai_env_vars(
    proxy: ProxyServer, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", proxy.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    fake_upstream.script(reply("via env"))

    out = openai.OpenAI(max_retries=0).chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "hi"}]
    )

    assert out.choices[0].message.content == "via env"
    # No apiKeyEnv in the config: the client's own key is what the upstream sees.
    assert fake_upstream.requests[-1].headers["authorization"] == "Bearer sk-from-env"


def test_proxy_without_providers_block_uses_openai_env_upstream(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The proxy's own default provider: OPENAI_BASE_URL + OPENAI_API_KEY from its environment.
    monkeypatch.setenv("OPENAI_BASE_URL", fake_upstream.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proxy-upstream")
    server = start_proxy(None)
    client = openai.OpenAI(base_url=server.url, api_key=CLIENT_KEY, max_retries=0)
    fake_upstream.script(reply("default provider"))

    out = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "hi"}]
    )

    assert out.choices[0].message.content == "default provider"
    assert fake_upstream.requests[-1].path == CHAT
    assert fake_upstream.requests[-1].headers["authorization"] == "Bearer sk-proxy-upstream"


@pytest.mark.parametrize(
    "provider_key", ["sk-upstream-secret", None], ids=["provider_key_set", "provider_key_unset"]
)
def test_proxy_keys_pick_the_tenant_and_never_reach_the_provider(
    provider_key: str | None,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy_key = "cascade-team-a-secret"
    monkeypatch.setenv("CASCADE_TEST_TEAM_A", proxy_key)
    if provider_key is None:
        monkeypatch.delenv(UPSTREAM_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(UPSTREAM_KEY_ENV, provider_key)
    config = write_config(
        tmp_path / "auth.json",
        fake_upstream.url,
        providers={"openai": {"baseUrl": fake_upstream.url, "apiKeyEnv": UPSTREAM_KEY_ENV}},
        auth={"keys": [{"keyEnv": "CASCADE_TEST_TEAM_A", "tenant": "team-a"}]},
    )
    server = start_proxy(config)
    hi = [{"role": "user", "content": "hi"}]

    intruder = openai.OpenAI(base_url=server.url, api_key="sk-not-a-proxy-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        intruder.chat.completions.create(model="gpt-fake", messages=hi)
    assert refused.value.status_code == 401
    assert "proxy key" in refused.value.body["message"]
    assert fake_upstream.requests == []
    # the key under another scheme is no proxy key either
    basic = httpx.post(
        f"{server.url}/chat/completions",
        json={"model": "m", "messages": hi},
        headers={"authorization": f"Basic {proxy_key}"},
    )
    assert basic.status_code == 401 and fake_upstream.requests == []

    client = openai.OpenAI(base_url=server.url, api_key=proxy_key, max_retries=0)
    client.chat.completions.create(model="gpt-fake", messages=hi, extra_headers=SESSION_A)
    list(client.chat.completions.create(model="gpt-fake", messages=hi, stream=True))
    client.models.list()
    expected = f"Bearer {provider_key}" if provider_key else None
    assert len(fake_upstream.requests) == 3
    for seen in fake_upstream.requests:
        assert seen.headers.get("authorization") == expected
        assert proxy_key not in json.dumps(dict(seen.headers))
    listed = httpx.get(
        f"{server.origin}/v1/sessions", headers={"authorization": f"Bearer {proxy_key}"}
    ).json()
    assert "auth-a" in {s["id"] for s in listed["data"]}
    # the session API's compaction calls the fast model with the same credentials
    turns = [
        {"role": r, "content": f"turn {i}"}
        for i, r in enumerate(["user", "assistant"] * 8 + ["user"])
    ]
    client.chat.completions.create(
        model="gpt-fake", messages=turns, extra_headers={"X-Session-Id": "long"}
    )
    before = len(fake_upstream.requests)
    httpx.post(
        f"{server.origin}/v1/sessions/long/compact",
        timeout=30,
        headers={"authorization": f"Bearer {proxy_key}"},
    )
    assert len(fake_upstream.requests) > before  # the fast model was called
    for seen in fake_upstream.requests:
        assert seen.headers.get("authorization") == expected
        assert proxy_key not in json.dumps(dict(seen.headers))


@pytest.mark.parametrize(
    ("env_value", "expected"),
    [("sk-upstream-secret", "Bearer sk-upstream-secret"), (None, f"Bearer {CLIENT_KEY}")],
    ids=["api_key_env_set", "api_key_env_unset_forwards_client_key"],
)
def test_upstream_credentials(
    env_value: str | None,
    expected: str,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if env_value is None:
        monkeypatch.delenv(UPSTREAM_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(UPSTREAM_KEY_ENV, env_value)
    provider = {"baseUrl": fake_upstream.url, "apiKeyEnv": UPSTREAM_KEY_ENV}
    config = write_config(
        tmp_path / "creds.json", fake_upstream.url, providers={"openai": provider}
    )
    server = start_proxy(config)
    client = openai.OpenAI(base_url=server.url, api_key=CLIENT_KEY, max_retries=0)

    client.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": "hi"}])

    auth = fake_upstream.requests[-1].headers.get("authorization")
    assert auth == expected
    if env_value is not None:
        assert CLIENT_KEY not in json.dumps(dict(fake_upstream.requests[-1].headers))
