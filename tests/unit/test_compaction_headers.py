"""A compaction calls the fast model with the client's bearer when the provider has no key of
its own, so with the client's ``OpenAI-Organization`` and ``OpenAI-Project`` too: without
them the call went to the key's default organisation and project, not the ones the client's
own requests pick (with the provider's key ``Upstream`` drops them, as for every call)."""

from __future__ import annotations

from proxy.config import parse_config
from proxy.services.compaction_job import job_for
from proxy.upstream import Upstream

CLIENT = {
    "authorization": "Bearer sk-client",
    "openai-organization": "org-client",
    "openai-project": "proj-client",
    "x-session-id": "s",
}


def _sent(env: dict[str, str]) -> dict[str, str]:
    cfg = parse_config({"providers": {"openai": {"apiKeyEnv": "CASCADE_TEST_KEY"}}}, env)
    job = job_for(
        cfg, tenant="t", session_id="s", agent="default", model="m", headers=CLIENT, trigger="t"
    )
    return Upstream(env=env)._headers(job.provider, job.headers)


def test_a_compaction_on_the_clients_bearer_carries_its_organisation_and_project() -> None:
    sent = _sent({})
    assert sent["authorization"] == CLIENT["authorization"]
    assert sent["openai-organization"] == "org-client"
    assert sent["openai-project"] == "proj-client"
    assert "x-session-id" not in sent


def test_a_compaction_on_the_providers_key_carries_neither() -> None:
    sent = _sent({"CASCADE_TEST_KEY": "sk-operator"})
    assert sent["authorization"] == "Bearer sk-operator"
    assert "openai-organization" not in sent and "openai-project" not in sent


def test_a_compaction_on_a_clients_x_api_key_carries_it() -> None:
    """A client paying with an ``x-api-key`` (as with Azure's ``api-key``) pays for its
    compactions with it too: dropped, the fast model's call went keyless."""
    cfg = parse_config({"providers": {"openai": {}}}, {})
    headers = {"x-api-key": "client-key-0123456", "x-session-id": "s"}
    job = job_for(
        cfg, tenant="t", session_id="s", agent="default", model="m", headers=headers, trigger="t"
    )
    sent = Upstream(env={})._headers(job.provider, job.headers)
    assert sent["x-api-key"] == "client-key-0123456" and "authorization" not in sent
