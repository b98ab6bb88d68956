"""proxy/auth.py: constant-time key matching and the rule on non-loopback addresses."""

from __future__ import annotations

import hmac
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from proxy import auth
from proxy.app import create_app
from proxy.auth import match_key
from proxy.cli import main
from proxy.config import ConfigError, load_config, parse_config
from proxy.listen import InsecureListen, is_loopback, open_listen_warning
from proxy.settings import Settings

KEYS = {"keys": [{"keyEnv": "K1", "tenant": "one"}, {"keyEnv": "K2", "tenant": "two"}]}
ENV = {"K1": "first-secret", "K2": "second-secret-longer"}


def test_keys_are_matched_in_constant_time_over_every_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    cfg = parse_config({"auth": KEYS})
    for token, tenant in (
        (b"first-secret", "one"),
        (b"second-secret-longer", "two"),
        (b"first-secre", None),
        (b"x" * 500, None),
    ):
        calls.clear()
        found = match_key(token, cfg, ENV)
        assert (found.tenant if found else None) == tenant
        # both keys compared, even after a match; digests of one length, so neither the
        # guess's length nor how much of it matched shows in the timing
        assert len(calls) == 2
        assert all(len(a) == len(b) == 32 for a, b in calls)
    assert match_key(b"", cfg, ENV) is None
    assert match_key(b"anything", cfg, {}) is None  # an unset variable opens nothing


def test_a_key_may_only_name_agents_the_config_has() -> None:
    agents = {"coder": {}}
    cfg = parse_config(
        {
            "agents": agents,
            "auth": {"keys": [{"keyEnv": "K", "tenant": "t", "agents": ["coder", "default"]}]},
        }
    )
    assert cfg.auth.keys[0].agents == ("coder", "default")
    with pytest.raises(ConfigError, match="reviewer not in agents"):
        parse_config(
            {
                "agents": agents,
                "auth": {"keys": [{"keyEnv": "K", "tenant": "t", "agents": ["reviewer"]}]},
            }
        )
    with pytest.raises(ConfigError):  # an empty list would be a key that opens nothing
        parse_config({"auth": {"keys": [{"keyEnv": "K", "tenant": "t", "agents": []}]}})


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.5", False),
        ("proxy.internal", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def _config(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "agents.json"
    path.write_text(
        json.dumps({"providers": {"openai": {"baseUrl": "http://127.0.0.1:9/v1"}}, **extra})
    )
    return path


def test_a_non_loopback_address_needs_keys_or_an_explicit_override(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The override's warning is the start's, once it listens (the lifespan: an integration
    test, test_open_listen_warning.py): making the app, before any bind, says nothing."""
    monkeypatch.delenv("CASCADE_ALLOW_UNAUTHENTICATED", raising=False)
    bare = _config(tmp_path)
    cfg = load_config(bare, {})
    with pytest.raises(InsecureListen, match="refusing to listen on 0.0.0.0 without proxy keys"):
        create_app(Settings(host="0.0.0.0", config=bare))
    create_app(Settings(host="127.0.0.1", config=bare))
    create_app(Settings(host="0.0.0.0", config=bare, allow_unauthenticated=True))
    monkeypatch.setenv("CASCADE_ALLOW_UNAUTHENTICATED", "1")
    create_app(Settings(host="0.0.0.0", config=bare))
    monkeypatch.delenv("CASCADE_ALLOW_UNAUTHENTICATED")
    keyed = _config(tmp_path, auth={"keys": [{"keyEnv": "K1", "tenant": "one"}]})
    create_app(Settings(host="0.0.0.0", config=keyed))
    assert "no proxy keys" not in caplog.text
    with_keys = load_config(keyed, {})
    warning = open_listen_warning("0.0.0.0", cfg, allow_unauthenticated=True)
    # the variable too: a container (.env.example) allows it by CASCADE_ALLOW_UNAUTHENTICATED
    allowed = "(allowed by --allow-unauthenticated or CASCADE_ALLOW_UNAUTHENTICATED=1)"
    assert warning is not None and f"with no proxy keys {allowed}" in warning
    assert open_listen_warning("127.0.0.1", cfg, allow_unauthenticated=True) is None
    assert open_listen_warning("0.0.0.0", with_keys, allow_unauthenticated=True) is None


def test_serve_refuses_in_one_line_before_listening(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CASCADE_ALLOW_UNAUTHENTICATED", raising=False)
    logger = logging.getLogger("cascade")
    saved = (logger.handlers[:], logger.level, logger.propagate)  # serve sets them
    try:
        assert main(["serve", "--host", "0.0.0.0", "--config", str(_config(tmp_path))]) == 2
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    err = capsys.readouterr().err
    assert "refusing to listen on 0.0.0.0" in err and "--allow-unauthenticated" in err
    assert "CASCADE_ALLOW_UNAUTHENTICATED=1" in err and "Traceback" not in err
