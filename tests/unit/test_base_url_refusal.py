"""A provider's baseUrl that is no http(s) URL is refused when the config is loaded (one
line naming the key, or OPENAI_BASE_URL), not found out by every request as a 502; and
a 502 for one says the baseUrl is at fault, not the caFile."""

from __future__ import annotations

import pytest

from proxy.config import ConfigError, ProviderConfig, parse_config
from proxy.errors import UpstreamUnavailable
from proxy.transport import build_client
from proxy.upstream import Upstream


@pytest.mark.parametrize(
    ("raw", "env", "where"),
    [
        ({"providers": {"p": {"baseUrl": "notaurl"}}}, {}, "providers.p.baseUrl"),
        ({"providers": {"p": {"baseUrl": "ftp://h/v1"}}}, {}, "providers.p.baseUrl"),
        ({"providers": {"p": {"baseUrl": "http://h:99999/v1"}}}, {}, "providers.p.baseUrl"),
        ({"providers": {"openai": {"baseUrl": "http://"}}}, {}, "providers.openai.baseUrl"),
        ({}, {"OPENAI_BASE_URL": "localhost:8000/v1"}, "OPENAI_BASE_URL"),
    ],
)
def test_a_base_url_that_is_no_http_url_is_refused_at_load(
    raw: dict[str, object], env: dict[str, str], where: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env)
    assert str(refused.value) == f"{where}: not an http(s) URL with a host (and a port 1-65535)"


def test_usable_base_urls_load() -> None:
    parse_config({"providers": {"p": {"baseUrl": "http://user:pw@[::1]:8000/v1"}}}, {})
    parse_config({"providers": {"p": {"baseUrl": "http://h/my models/v1"}}}, {})  # %20
    parse_config({}, {"OPENAI_BASE_URL": "https://openrouter.ai/api/v1"})


async def test_a_502_for_a_bad_base_url_blames_the_base_url_not_the_ca_file() -> None:
    upstream = Upstream(build_client(kind="httpx"), env={})
    with pytest.raises(UpstreamUnavailable) as info:
        await upstream.call(
            ProviderConfig(base_url="notaurl", name="p"), "GET", "/models", client_headers={}
        )
    await upstream.client.aclose()
    said = str(info.value)
    assert "caFile" not in said  # was "its caFile None cannot be loaded (the baseUrl is …)"
    assert said.endswith("fix the provider's baseUrl in config")


@pytest.mark.parametrize(
    ("raw", "env", "where"),
    [
        ({"providers": {"p": {"baseUrl": "https://h/v1?key=QSECRET"}}}, {}, "providers.p.baseUrl"),
        ({"providers": {"p": {"baseUrl": "https://h/v1#QSECRET"}}}, {}, "providers.p.baseUrl"),
        ({}, {"OPENAI_BASE_URL": "https://h/v1?api-version=QSECRET"}, "OPENAI_BASE_URL"),
    ],
)
def test_a_base_url_with_a_query_or_fragment_is_refused_at_load(
    raw: dict[str, object], env: dict[str, str], where: str
) -> None:
    # Regression: loaded, and each call went to https://h/v1?key=…/chat/completions (the
    # request path appended to the query), the start-up block printing the query whole.
    with pytest.raises(ConfigError, match=f"^{where}: has a query string or fragment") as refused:
        parse_config(raw, env)
    assert "QSECRET" not in str(refused.value)


@pytest.mark.parametrize(
    ("raw", "env", "where"),
    [
        ({"providers": {"p": {"baseUrl": "http://h/v1\n"}}}, {}, "providers.p.baseUrl"),
        ({"providers": {"p": {"baseUrl": " http://h/v1"}}}, {}, "providers.p.baseUrl"),
        ({"providers": {"p": {"baseUrl": "http://h/v\x7f1"}}}, {}, "providers.p.baseUrl"),
        ({}, {"OPENAI_BASE_URL": "http://h/v1\t"}, "OPENAI_BASE_URL"),
    ],
)
def test_a_base_url_with_a_space_or_control_character_is_refused_at_load(
    raw: dict[str, object], env: dict[str, str], where: str
) -> None:
    """``urlsplit`` drops them (a template's trailing newline), so the URL passed, and each
    request was a 502, its reload an ERROR with httpx's traceback (``InvalidURL``)."""
    with pytest.raises(ConfigError) as refused:
        parse_config(raw, env)
    assert str(refused.value).startswith(f"{where}: has a control character, or a space at an end")


def test_an_azure_portal_url_with_its_api_version_is_told_to_set_api_version() -> None:
    """A deployment URL copied whole from Azure's portal holds its ``?api-version=``: the
    refusal names the ``apiVersion`` key that sends it on every call, where it named only
    ``apiKeyEnv``, which has nothing to do with it."""
    url = "https://r.openai.azure.com/openai/deployments/gpt4o?api-version=2024-10-21"
    with pytest.raises(ConfigError) as refused:
        parse_config({"providers": {"az": {"baseUrl": url}}}, {})
    assert str(refused.value).endswith(
        'give the URL up to its path, and "apiVersion": "2024-10-21"'
    )
