"""A provider that quotes the key it was sent in its error (``Incorrect API key provided:
sk-…``) never has that key leave the proxy: not in what the client gets (a chat's error
relayed, a chat's 502, a stream's refusal and its in-band error frames, the models and
embeddings passthroughs, plain and under ``/s/{id}/v1``), and not in any log line; whether
the key is the provider's ``apiKeyEnv`` one or the client's own token, forwarded."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest

from tests.fakes.replies import Error, Raw, RecordedRequest, error, raw
from tests.fakes.upstream import CHAT, EMBEDDINGS, MODELS, FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, write_config

CLIENT_KEY = "sk-client-0123456789abcdef"
PROVIDER_KEY = "sk-provider-fedcba9876543210"
_MESSAGES = [{"role": "user", "content": "hi"}]


def _quoted(req: RecordedRequest) -> dict[str, object]:
    sent = req.headers.get("authorization", "").removeprefix("Bearer ")
    return {"error": {"message": f"Incorrect API key provided: {sent}.", "code": "bad_key"}}


def _refused(req: RecordedRequest) -> Error:
    return error(401, _quoted(req))


def _as_success(req: RecordedRequest) -> Error:
    return error(200, _quoted(req))


def _in_band(req: RecordedRequest) -> Raw:
    return raw(f"data: {json.dumps(_quoted(req))}\n\n", "data: [DONE]\n\n")


def _whole(req: RecordedRequest) -> Raw:
    return raw(json.dumps(_quoted(req)), headers={"content-type": "application/json"})


def _answers(http: httpx.Client, fake: FakeUpstream) -> list[httpx.Response]:
    fake.script(_refused, _as_success, _refused, _in_band, _whole, endpoint=CHAT)
    fake.script(_refused, _refused, endpoint=MODELS)
    fake.script(_refused, _refused, endpoint=EMBEDDINGS)
    chat = {"model": "gpt-fake", "messages": _MESSAGES}
    stream = {**chat, "stream": True}
    embed = {"model": "e", "input": "a"}
    return [
        http.post("/v1/chat/completions", json=chat),
        http.post("/v1/chat/completions", json=chat),  # an error object sent as a 200: a 502
        http.post("/v1/chat/completions", json=stream),
        http.post("/v1/chat/completions", json=stream),
        http.post("/v1/chat/completions", json=stream),
        http.get("/v1/models"),
        http.get("/s/run-1/v1/models"),
        http.post("/v1/embeddings", json=embed),
        http.post("/s/run-1/v1/embeddings", json=embed),
    ]


@pytest.mark.parametrize("whose", ["client", "provider"])
def test_a_quoted_key_reaches_neither_the_client_nor_the_log(
    whose: str,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    records: Records,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider = {"baseUrl": fake_upstream.url, "timeoutSeconds": 10}
    if whose == "provider":
        monkeypatch.setenv("CASCADE_TEST_QUOTED_KEY", PROVIDER_KEY)
        provider["apiKeyEnv"] = "CASCADE_TEST_QUOTED_KEY"
    config = write_config(tmp_path / "agents.json", "", providers={"openai": provider})
    proxy = start_proxy(config)
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "x-session-id": "run-1"}
    with httpx.Client(base_url=proxy.origin, headers=headers, timeout=10) as http:
        answers = _answers(http, fake_upstream)
    key = PROVIDER_KEY if whose == "provider" else CLIENT_KEY
    sent = {r.headers.get("authorization") for r in fake_upstream.requests}
    assert sent == {f"Bearer {key}"}  # every path called the provider with it
    assert [a.status_code for a in answers] == [401, 502, 401, 200, 200, 401, 401, 401, 401]
    for answer in answers:
        assert "Incorrect API key provided: [REDACTED]." in answer.text, answer.text
        assert key not in answer.text
    logged = logging.Formatter("%(message)s %(fields)s").format
    lines = [logged(r) if hasattr(r, "fields") else r.getMessage() for r in records.records]
    assert any("answered 401" in line for line in lines)
    assert not [line for line in lines if key in line or CLIENT_KEY in line]
