"""Headroom, the replay's reference proxy, runs at one pinned version in a venv of its own."""

from __future__ import annotations

from pathlib import Path

from bench import headroom_env, replay_policies


def test_the_pin_is_the_version_the_issue_measured() -> None:
    assert headroom_env.REQUIREMENT == "headroom-ai[proxy]==0.42.0"


def test_without_installing_a_missing_venv_is_reported_not_raised(tmp_path: Path) -> None:
    env = headroom_env.ensure(install=False, venv=tmp_path / "none")
    assert not env.available and "has no Headroom" in env.reason


def test_headroom_runs_only_when_named() -> None:
    assert replay_policies.HEADROOM in replay_policies.ALL_POLICIES
    assert replay_policies.HEADROOM not in replay_policies.DEFAULT_POLICIES
