"""The client's query string reaches the provider's chat completions, as it reaches
``/v1/models`` and ``/v1/embeddings``, and the summary calls a request's compaction makes:
an SDK's ``extra_query`` (a gateway's ``api-version``) was dropped from chat requests only."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.upstream import CHAT, FakeUpstream
from tests.integration.api.compaction_stack import FAST, Agent, stack, wait_until, words
from tests.integration.api.conftest import StartProxy, write_config

MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_the_query_string_goes_upstream_with_the_chat_request(
    stream: bool, client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    answer = client.chat.completions.create(
        model="gpt-fake",
        messages=MESSAGES,
        stream=stream,
        extra_query={"api-version": "2024-10-21", "tag": ["a", "b"], "key": "gw-key-0123456"},
    )
    if stream:
        list(answer)  # type: ignore[arg-type]
    client.chat.completions.create(model="gpt-fake", messages=MESSAGES, stream=stream)

    queries = [r.query for r in fake_upstream.requests if r.path == CHAT]
    # (the SDK writes a list as tag[]=a&tag[]=b; both values go on, in order; a key goes on
    # as sent: only a provider's error is scrubbed of it, credentials.sent_secrets)
    assert queries == ["api-version=2024-10-21&tag%5B%5D=a&tag%5B%5D=b&key=gw-key-0123456", ""]


def test_a_proxy_key_in_the_query_string_stays_back(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: a client that sends its proxy key in the query as well as in the header
    (as some providers take a key, ``?key=``) had it forwarded to the provider with the rest
    of the query, on chat, models and embeddings; the provider never sees a proxy key
    (README, Proxy keys). Another parameter still goes on."""
    key = "cascade-key-in-query-5b2e"
    monkeypatch.setenv("CASCADE_TEST_QUERY_KEY", key)
    auth = {"keys": [{"keyEnv": "CASCADE_TEST_QUERY_KEY", "tenant": "t"}]}
    proxy = start_proxy(write_config(tmp_path / "agents.json", fake_upstream.url, auth=auth))
    query = {"key": key, "api-version": "1", "k2": f" {key}"}
    with httpx.Client(
        base_url=proxy.origin, timeout=10, headers={"authorization": f"Bearer {key}"}
    ) as http:
        chat = {"model": "gpt-fake", "messages": MESSAGES}
        assert http.post("/v1/chat/completions", params=query, json=chat).status_code == 200
        assert http.get("/v1/models", params=query).status_code == 200
        embed = {"model": "e", "input": "x"}
        assert http.post("/v1/embeddings", params=query, json=embed).status_code == 200
    assert [r.query for r in fake_upstream.requests] == ["api-version=1"] * 3


def test_a_proxy_key_as_a_parameter_name_or_a_bearer_value_stays_back(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: only a value that is a key stayed back; a key sent as a parameter's name
    (``?<key>``, a template that put the key where a name goes), or as a bearer value
    (``?authorization=Bearer <key>``), went to the provider, under ``/s/`` too."""
    key = "cascade-key-as-name-7c1d"
    monkeypatch.setenv("CASCADE_TEST_QUERY_KEY", key)
    auth = {"keys": [{"keyEnv": "CASCADE_TEST_QUERY_KEY", "tenant": "t"}]}
    proxy = start_proxy(write_config(tmp_path / "agents.json", fake_upstream.url, auth=auth))
    query = f"{key}&{key}=1&authorization=Bearer%20{key}&api-version=1&k2=bEaReR+{key}"
    with httpx.Client(
        base_url=proxy.origin, timeout=10, headers={"authorization": f"Bearer {key}"}
    ) as http:
        chat = {"model": "gpt-fake", "messages": MESSAGES}
        assert http.post(f"/s/q-1/v1/chat/completions?{query}", json=chat).status_code == 200
        assert http.get(f"/v1/models?{query}").status_code == 200
        http.get(f"/s/q-1/v1/models/gpt-fake?{query}")  # the fake knows no model by id
        embed = {"model": "e", "input": "x"}
        assert http.post(f"/s/q-1/v1/embeddings?{query}", json=embed).status_code == 200
    assert [r.query for r in fake_upstream.requests] == ["api-version=1"] * 4


def test_a_base64_proxy_key_sent_unencoded_in_the_query_stays_back(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: a key holding a ``+`` (``openssl rand -base64``), written into the query
    unencoded, reads as a space there (``+`` is a space in a query) and so matched no key:
    ``?key=<key>`` went on to the provider. The query's ``+`` is tried as itself too."""
    key = "cK9+Zq/7Lw+XbE2r=="
    monkeypatch.setenv("CASCADE_TEST_QUERY_KEY", key)
    auth = {"keys": [{"keyEnv": "CASCADE_TEST_QUERY_KEY", "tenant": "t"}]}
    proxy = start_proxy(write_config(tmp_path / "agents.json", fake_upstream.url, auth=auth))
    with httpx.Client(
        base_url=proxy.origin, timeout=10, headers={"authorization": f"Bearer {key}"}
    ) as http:
        chat = {"model": "gpt-fake", "messages": MESSAGES}
        path = f"/v1/chat/completions?key={key}&q=a+b&{key}"
        assert http.post(path, json=chat).status_code == 200
        assert http.get(f"/v1/models?key={key}&q=a+b").status_code == 200
    assert [r.query for r in fake_upstream.requests] == ["q=a+b"] * 2


def test_a_compaction_started_by_a_request_sends_its_query_string_too(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """Regression: the summary call a request's compaction makes to the same provider went
    without the query string the request's own call carried, so a gateway that needs its
    ``api-version`` (an Azure API Management front, a self-hosted router) refused every
    summary while the agent's calls worked."""
    query = {"api-version": "2024-10-21"}
    with stack(tmp_path, db_dsn, fake_upstream) as s:
        agent = Agent(s.client("query-compaction"))
        for i in range(5):  # the fifth crosses softFraction
            agent.say(words(450, f"t{i}"), extra_query=query)
        wait_until(lambda: s.summaries("query-compaction"), what="the background summary")
    fast = [r.query for r in fake_upstream.requests if r.path == CHAT and r.json["model"] == FAST]
    assert fast and set(fast) == {"api-version=2024-10-21"}
