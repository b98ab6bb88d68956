"""The SDK's ``AzureOpenAI`` client's embeddings (``/openai/deployments/<d>/embeddings``) and
model calls (``/openai/models``, ``/openai/models/<id>``), also under ``/s/<id>/``: served as
``/v1/embeddings`` and ``/v1/models`` are, the deployment being the embeddings' model and the
client's ``api-version`` (the version of Azure's path API) kept back."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.upstream import EMBEDDINGS, MODELS, FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

KEY = "azure-client-key-0123456789abcdef"


def _azure(endpoint: str) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(
        azure_endpoint=endpoint, api_key=KEY, api_version="2024-10-21", max_retries=0
    )


def test_an_azure_client_embeds_and_lists_models_through_the_proxy(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    client = _azure(proxy.origin)
    vectors = client.embeddings.create(model="text-embedding-3-small", input=["hi", "there"])
    assert len(vectors.data) == 2 and vectors.data[0].embedding
    sent = fake_upstream.requests[-1]
    assert sent.path == EMBEDDINGS and sent.json["model"] == "text-embedding-3-small"
    assert "api-version" not in sent.query and sent.headers.get("api-key") == KEY
    listed = [m.id for m in client.models.list()]
    assert listed == list(fake_upstream.models)
    assert fake_upstream.requests[-1].path == MODELS
    assert "api-version" not in fake_upstream.requests[-1].query
    session = _azure(f"{proxy.origin}/s/azure-sess")
    raw = session.embeddings.with_raw_response.create(model="emb", input="hi")
    assert raw.headers["x-session-id"] == "azure-sess"
    assert session.models.with_raw_response.list().headers["x-session-id"] == "azure-sess"


def test_the_deployment_is_the_embeddings_model_whatever_the_body_names(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    with httpx.Client(base_url=proxy.origin, headers={"api-key": KEY}) as http:
        answer = http.post(
            "/openai/deployments/my-emb/embeddings",
            params={"api-version": "2024-10-21", "route": "eu"},
            json={"model": "something-else", "input": "hi"},
        )
        assert answer.status_code == 200, answer.text
        sent = fake_upstream.requests[-1]
        assert sent.json == {"model": "my-emb", "input": "hi"}
        assert sent.query == "route=eu"  # the rest of the query goes on
        same = b'{"input": "hi",  "model": "my-emb"}'  # naming the deployment: sent as it came
        answer = http.post("/openai/deployments/my-emb/embeddings", content=same)
        assert answer.status_code == 200, answer.text
        assert fake_upstream.requests[-1].content == same


def test_models_under_a_deployment_are_the_404_naming_where_azure_lists_them(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """An ``AzureOpenAI`` given a deployment's URL as its ``base_url`` chats through it, but
    lists models under the deployment (``/openai/deployments/<d>/models``), where Azure
    serves none (its 404 is "Resource not found"): the proxy's 404 says where Azure lists
    them, ``/openai/models``, and how the client reaches that path."""
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    for root in (proxy.origin, f"{proxy.origin}/s/azure-sess"):
        client = openai.AzureOpenAI(
            base_url=f"{root}/openai/deployments/gpt-fake",
            api_key=KEY,
            api_version="2024-10-21",
            max_retries=0,
        )
        with pytest.raises(openai.NotFoundError) as missing:
            client.models.list()
        message = missing.value.message
        assert "/openai/deployments/gpt-fake/models" in message
        assert "Azure lists models at /openai/models, under no deployment" in message
        assert "azure_endpoint" in message
        with pytest.raises(openai.NotFoundError) as one:
            client.models.retrieve("gpt-fake")
        assert "Azure lists models at /openai/models" in one.value.message
        assert isinstance(one.value.body, dict) and one.value.body["code"] == "unknown_url"
    assert fake_upstream.requests == []
