"""Models that take no system message (``proxy/services/system_role.py``): OpenAI's o1-mini
and o1-preview answer one with 400 ``unsupported_value`` (microsoft/agent-framework#1077
lists every OpenAI chat model; only o1-mini failed there, o1-preview in janhq/jan#4392)."""

from __future__ import annotations

from proxy.config import ModelConfig
from proxy.services.system_role import as_user, takes_system
from tests.fakes.strict_openai import violations


def test_o1_mini_and_o1_preview_take_none_and_a_config_entry_decides_first() -> None:
    plain = ModelConfig()
    for model in ("o1-mini", "o1-mini-2024-09-12", "o1-preview", "openai/o1-mini"):
        assert not takes_system(model, plain), model
    for model in ("o1", "o1-2024-12-17", "o3-mini", "o4-mini", "gpt-4o", "my-o1-minis"):
        assert takes_system(model, plain), model
    assert takes_system("o1-mini", ModelConfig(system_messages=True))
    assert not takes_system("azure-deploy", ModelConfig.model_validate({"systemMessages": False}))


def test_only_the_leading_messages_named_go_as_user_messages() -> None:
    block = {"role": "system", "content": "<memory>x</memory>"}
    user = {"role": "user", "content": "hi"}
    assert as_user([block, user], (0,)) == [{"role": "user", "content": block["content"]}, user]
    assert as_user([block, user], ()) == [block, user]  # the client's own: as it came
    late = {"role": "system", "content": "later"}
    fast = [{"role": "developer", "content": "do", "name": "n"}, user, late]
    assert as_user(fast) == [{"role": "user", "content": "do", "name": "n"}, user, late]


def test_the_strict_provider_refuses_a_system_message_to_o1_mini() -> None:
    body = {
        "model": "o1-mini",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
    }
    assert violations(body) == ["messages[0].role: does not support 'system' with this model"]
    assert violations({**body, "model": "o1"}) == []
