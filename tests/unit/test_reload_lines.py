"""What a reload logs, as the log writes it (every line goes through the secret scrub,
``proxy.logs.masked``): a refusal's reason whole, so the operator reads why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from proxy.cascade.types import CONFIG_REJECTED
from proxy.config import load_config
from proxy.config_watch import ConfigHolder
from proxy.logs import masked


def _holder(tmp_path: Path) -> ConfigHolder:
    path = tmp_path / "agents.json"
    path.write_text("{}")
    return ConfigHolder(load_config(path, {}), path)


@pytest.mark.parametrize(
    ("key_env", "why"),
    [
        ("sk-proj-1a2b3c4d5e6f7a8b9c0d", "not an environment variable's name"),
        ("", "empty; name the variable"),
        ("${OPENAI_API_KEY}", "takes the variable's name as it is"),
    ],
)
def test_a_refused_api_key_env_is_logged_with_its_reason_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, key_env: str, why: str
) -> None:
    """``providers.p.apiKeyEnv: not an environment variable's name`` read to the scrub as a
    key and its value: the line said ``apiKeyEnv: [REDACTED] an environment variable's
    name``, the opposite of the reason."""
    holder = _holder(tmp_path)
    provider = {"baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": key_env}
    holder.path.write_text(json.dumps({"providers": {"p": provider}}))  # type: ignore[union-attr]
    with caplog.at_level(logging.WARNING, logger="cascade.config"):
        assert holder.reload({})[0] == CONFIG_REJECTED
    [line] = [masked(r.getMessage()) for r in caplog.records]
    assert f"providers.p.apiKeyEnv: {why}" in line
    assert "sk-proj-1a2b3c4d5e6f7a8b9c0d" not in line
