"""The words a 404 adds for a path of Azure's or of OpenAI's other APIs
(``wiring._unserved_hint``) name what the proxy serves and nothing it does not: an
``AzureOpenAI`` client given the proxy's ``/v1`` URL is not told that nothing is served
under ``/v1/``, where its chat, models and embeddings are."""

from __future__ import annotations

import pytest

from proxy.wiring import _unserved_hint


@pytest.mark.parametrize(
    "path",
    [
        "/v1/deployments/gpt/chat/completions",  # AzureOpenAI(base_url=<proxy>/v1)
        "/openai/deployments/dall-e/images/generations",
        "/s/s1/openai/deployments/gpt/audio/speech",
    ],
)
def test_an_azure_path_is_told_what_is_served_under_v1_too(path: str) -> None:
    hint = _unserved_hint(path)
    assert "/openai/deployments/<deployment>/embeddings and /openai/models" in hint
    assert "nor OpenAI's under /v1/" not in hint
    assert "under /v1/ it serves OpenAI's chat completions, models and embeddings" in hint


@pytest.mark.parametrize(
    "path", ["/v1/embeddings/", "/v1/models", "/s/s1/v1/embeddings", "/v1/chat/completion"]
)
def test_a_path_of_no_unserved_api_gets_no_list(path: str) -> None:
    assert _unserved_hint(path) == ""


@pytest.mark.parametrize(
    ("path", "hint"),
    [
        ("/s/deployments/v1/responses", "of OpenAI's APIs the proxy serves chat completions"),
        ("/s/deployments/v1/nope", ""),
        ("/v1/sessions/deployments/x/nope", ""),
        ("/s/deployments/openai/deployments/d/images/generations", "of Azure's paths"),
    ],
)
def test_a_session_named_deployments_is_no_azure_path(path: str, hint: str) -> None:
    """A session id is any name: ``deployments`` in its place (``/s/deployments/``, the
    session API's ``/v1/sessions/deployments/``) made every 404 there name Azure's paths."""
    said = _unserved_hint(path)
    assert said.startswith(f"; {hint}") if hint else said == ""


@pytest.mark.parametrize(
    ("path", "listed"),
    [
        ("/openai/deployments/gpt/models", True),
        ("/s/s1/openai/deployments/gpt/models/gpt-4o", True),
        ("/openai/deployments/gpt/modelsx", False),
        ("/v1/deployments/gpt/models", False),  # AzureOpenAI(base_url=<proxy>/v1): the origin
    ],
)
def test_models_under_a_deployment_are_told_where_azure_lists_them(path: str, listed: bool) -> None:
    said = _unserved_hint(path)
    assert ("Azure lists models at /openai/models" in said) is listed
    assert said  # an Azure path's hint either way
