"""``auth.key_in_force`` judges a waiting request's key as the gate judges a new one
(README, "Proxy keys"): the same bearer, the variable's value stripped, every key compared;
a reload that removes the key, every key, or moves it to another tenant with the same
agents refuses it, and the refusal names neither the key nor a tenant."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.auth import PROXY_KEY, ProxyAuth, key_in_force, match_key
from proxy.config import parse_config
from proxy.config_watch import ConfigHolder
from proxy.errors import Unauthorized

SECRET = "proxy-secret-9f1c"
ENV = {"KEY_A": SECRET + "\n", "KEY_B": "other-secret-77aa", "METRICS": "metrics-secret-31b0"}
AGENTS = {"agents": {"coder": {}, "reviewer": {}}}


def _cfg(*keys: dict[str, Any], metrics: bool = False) -> Any:
    auth: dict[str, Any] = {"keys": list(keys)}
    if metrics:
        auth["metricsKeyEnv"] = "METRICS"
    return parse_config({**AGENTS, "auth": auth})


def _scope(token: str, cfg: Any) -> dict[str, Any]:
    """A request the gate let in under ``cfg`` with ``token``."""
    scope: dict[str, Any] = {"headers": [(b"authorization", f"Bearer {token}".encode())]}
    key = match_key(token.encode(), cfg, ENV)
    if key is not None:
        scope[PROXY_KEY] = key
    return scope


A = {"keyEnv": "KEY_A", "tenant": "team", "agents": ["coder"]}
B = {"keyEnv": "KEY_B", "tenant": "team"}


def test_the_key_in_force_gives_its_current_agents_its_variable_stripped() -> None:
    scope = _scope(SECRET, _cfg(A, B))
    assert PROXY_KEY in scope  # the gate strips the variable's newline too
    widened = {**A, "agents": ["coder", "reviewer"]}
    assert key_in_force(scope, _cfg(widened, B), ENV) == ("coder", "reviewer")


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(lambda: _cfg(B), id="removed"),
        pytest.param(lambda: _cfg(), id="every key removed"),
        pytest.param(lambda: _cfg({**A, "tenant": "elsewhere"}, B), id="another tenant"),
        pytest.param(lambda: _cfg({**A, "keyEnv": "METRICS"}, B), id="another variable"),
    ],
)
def test_a_revoked_key_is_refused_naming_neither_key_nor_tenant(after: Any) -> None:
    scope = _scope(SECRET, _cfg(A, B))
    with pytest.raises(Unauthorized) as refused:
        key_in_force(scope, after(), ENV)
    message = str(refused.value)
    assert SECRET not in message and "team" not in message and "elsewhere" not in message
    assert refused.value.code == "invalid_api_key"


def test_the_metrics_key_lets_no_waiting_request_in() -> None:
    """The bearer is matched again, not the key the scope holds: the metrics key, which opens
    ``/metrics`` alone, is no proxy key."""
    scope = _scope(SECRET, _cfg(A, B))
    scope["headers"] = [(b"authorization", f"Bearer {ENV['METRICS']}".encode())]
    with pytest.raises(Unauthorized):
        key_in_force(scope, _cfg(A, B, metrics=True), ENV)


def test_a_pass_through_request_stays_one_until_the_config_has_keys() -> None:
    scope = _scope("sk-client", parse_config(AGENTS))
    assert key_in_force(scope, parse_config(AGENTS), ENV) is None
    with pytest.raises(Unauthorized):  # its tenant was its bearer's; now a key's or none
        key_in_force(_scope(SECRET, parse_config(AGENTS)), _cfg(A, B), ENV)


class _Unread(dict[str, str]):
    """An environment that must not be read."""

    def get(self, *args: Any) -> Any:
        raise AssertionError("the keys were matched again")


def test_under_the_config_the_gate_judged_the_key_is_not_matched_again() -> None:
    """Every chat asks as it takes its session, most with no reload since the gate: that
    costs no second match of the bearer against every key (a digest per key)."""
    cfg = _cfg(A, B)
    gate = ProxyAuth(_ok, ConfigHolder(cfg, None), env=ENV)
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"authorization", f"Bearer {SECRET}".encode())],
    }
    assert gate._refusal(scope, cfg) is None
    assert key_in_force(scope, cfg, _Unread()) == ("coder",)
    with pytest.raises(Unauthorized):  # a reload: matched again
        key_in_force(scope, _cfg(B), ENV)


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("not called")
