"""A provider at an old-style Azure deployment URL (``…/openai/deployments/<name>``), whose
API answers a call without ``api-version`` with a 404 "Resource not found": its
``apiVersion`` goes with every call, the chat's, the stream's, the summary's and the facts',
in place of a client's (an ``AzureOpenAI`` client's, whose path version stays back, sent
none there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai

from tests.fakes.dialects import AZURE_DEPLOYMENT, KEY, DialectUpstream
from tests.integration.api.compaction_stack import briefing, wait_until, words
from tests.integration.api.conftest import StartProxy


def test_an_azure_deployment_providers_api_version_goes_with_every_call(
    start_proxy: StartProxy, tmp_path: Path
) -> None:
    with DialectUpstream(AZURE_DEPLOYMENT, briefing=briefing()) as fake:
        cfg = {
            "providers": {"azure": {"baseUrl": fake.base_url, "apiVersion": "2024-10-21"}},
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
        client = openai.AzureOpenAI(
            azure_endpoint=f"{origin}/s/azure-dep",
            azure_ad_token=KEY,  # the client's bearer, as the deployment takes it
            api_version="2025-01-01-preview",
            max_retries=0,
        )
        messages: list[dict[str, Any]] = []
        for i in range(5):  # the fifth crosses softFraction
            messages.append({"role": "user", "content": words(450, f"t{i}")})
            stream = i % 2 == 1
            got = client.chat.completions.create(model="gpt-4o", messages=messages, stream=stream)  # type: ignore[call-overload]
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
        assert {r.query for r in fake.chats()} == {"api-version=2024-10-21"}
