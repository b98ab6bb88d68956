"""The ``auth`` section of a config whose keys belong to different tenants, each key put in
an environment variable of its own for the test's length (a config names keys by ``keyEnv``,
never by value)."""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["tenant_auth"]


def tenant_auth(
    monkeypatch: pytest.MonkeyPatch, *keys: tuple[str, str] | tuple[str, str, list[str]]
) -> dict[str, Any]:
    """``{"keys": [...]}`` for each ``(key, tenant)`` or ``(key, tenant, agents)``: a key
    with ``agents`` reaches only those agents' sessions."""
    entries: list[dict[str, Any]] = []
    for i, (key, tenant, *agents) in enumerate(keys):
        env = f"CASCADE_TEST_TENANT_KEY_{i}"
        monkeypatch.setenv(env, key)
        entries.append(
            {"keyEnv": env, "tenant": tenant} | ({"agents": agents[0]} if agents else {})
        )
    return {"keys": entries}
