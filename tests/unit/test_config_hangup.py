"""SIGHUP for an app's whole life (``config_watch.Hangup``): one during the start is judged
once the proxy serves, one while stopping changes nothing, and neither ends the process as
Python's default would."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from pathlib import Path

import pytest

from proxy import config_watch
from proxy.cascade.types import CONFIG_REJECTED, CONFIG_RELOADED
from proxy.config import Config, ConfigError
from proxy.config_watch import ConfigHolder, Hangup


def text(limit: int) -> str:
    return json.dumps({"models": {"default": {"contextLimit": limit}}})


def limit(holder: ConfigHolder) -> int:
    return holder.current.model_limits("m").context_limit


async def hang_up() -> None:
    """SIGHUP to this process, once it is sure to be taken (the default would end pytest)."""
    assert signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, None)
    os.kill(os.getpid(), signal.SIGHUP)
    await asyncio.sleep(0.1)  # the loop runs the handler


async def test_a_sighup_during_the_start_is_judged_once_the_proxy_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    holder = ConfigHolder.from_file(path, os.environ)
    hangup = Hangup(holder)
    undo = hangup.install()
    try:
        path.write_text(text(2000))
        with caplog.at_level(logging.INFO, "cascade.config"):
            await hang_up()
        assert limit(holder) == 1000  # the start goes on with the config it read
        assert "SIGHUP during the start" in caplog.text
        seen: list[str] = []
        hangup.serve(lambda name, _: seen.append(name), asyncio.Event())
        await asyncio.sleep(0.1)
        assert seen == [CONFIG_RELOADED]
        assert limit(holder) == 2000
    finally:
        undo()
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL


async def test_a_sighup_while_stopping_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    holder = ConfigHolder.from_file(path, os.environ)
    hangup = Hangup(holder)
    undo = hangup.install()
    try:
        seen: list[str] = []
        stopping = hangup.serve(lambda name, _: seen.append(name), asyncio.Event())
        stopping()
        path.write_text(text(2000))
        with caplog.at_level(logging.INFO, "cascade.config"):
            await hang_up()
        assert "SIGHUP while the proxy stops" in caplog.text
        assert seen == []
        assert limit(holder) == 1000
    finally:
        undo()


async def test_a_reread_waiting_on_a_broken_file_ends_with_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the watcher nothing sets ``stop``: a reread still waiting for the file to
    settle would judge it, and tell the streams, after the bus had stopped."""
    monkeypatch.setattr(config_watch, "SETTLE_SECONDS", 0.2)
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    holder = ConfigHolder.from_file(path, os.environ)
    hangup = Hangup(holder)
    undo = hangup.install()
    try:
        seen: list[str] = []
        stopping = hangup.serve(lambda name, _: seen.append(name), asyncio.Event())
        path.write_text(text(2000)[:10])
        await hang_up()  # waits for the cut-off file to settle
        stopping()
        await asyncio.sleep(0.6)
        assert seen == []
    finally:
        undo()


async def test_two_apps_in_one_process_each_reread_and_one_stopping_leaves_the_other(
    tmp_path: Path,
) -> None:
    """Apps in one process (tests, an embedding program) each take SIGHUP: a loop has one
    handler per signal, so the second's would replace the first's, and its removal at the
    second's stop would leave the first to Python's default, which ends the process."""
    holders, seen, undos = [], [], []
    for i in (1, 2):
        path = tmp_path / f"agents{i}.json"
        path.write_text(text(1000))
        holders.append(ConfigHolder.from_file(path, os.environ))
        hangup = Hangup(holders[-1])
        undos.append(hangup.install())
        hangup.serve(lambda name, _, i=i: seen.append((i, name)), asyncio.Event())
    try:
        for i in (1, 2):
            (tmp_path / f"agents{i}.json").write_text(text(2000))
        await hang_up()
        assert sorted(seen) == [(1, CONFIG_RELOADED), (2, CONFIG_RELOADED)]
        undos.pop()()  # the second app stops
        (tmp_path / "agents1.json").write_text(text(3000))
        await hang_up()
        assert limit(holders[0]) == 3000
    finally:
        for undo in undos:
            undo()
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL


async def test_a_sighup_on_a_file_already_refused_judges_it_again_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The watcher refused the save first; ``systemctl reload`` then said only "unchanged
    since it was last read", which reads as the file on disk being the one in force."""
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    holder = ConfigHolder.from_file(path, os.environ)
    seen: list[str] = []
    path.write_text(json.dumps({"models": {"default": {"contextLimit": "x"}}}))
    await config_watch.reread(holder, lambda name, _: seen.append(name), asyncio.Event())
    caplog.clear()
    with caplog.at_level(logging.INFO, "cascade.config"):
        await config_watch.reread(holder, lambda name, _: seen.append(name), asyncio.Event())
    assert caplog.messages == [
        f"SIGHUP: config {path} unchanged since it was refused; judging it again",
        f"config {path} rejected, keeping the previous one: "
        "models.default.contextLimit: Input should be a valid integer",
    ]
    assert seen == [CONFIG_REJECTED, CONFIG_REJECTED]
    assert limit(holder) == 1000
    path.write_text(text(3000))
    await config_watch.reread(holder, lambda name, _: seen.append(name), asyncio.Event())
    caplog.clear()
    with caplog.at_level(logging.INFO, "cascade.config"):
        await config_watch.reread(holder, lambda name, _: seen.append(name), asyncio.Event())
    assert caplog.messages == [f"SIGHUP: config {path} unchanged since it was last read"]
    assert limit(holder) == 3000


async def test_a_sighup_takes_a_file_refused_for_what_lay_outside_it_once_that_is_fixed(
    tmp_path: Path,
) -> None:
    """A ``caFile`` that did not load refuses the file; once the bundle is in place, SIGHUP
    was "unchanged" (the file's bytes were), and the operator had to edit the file."""
    bundle = tmp_path / "ca.pem"

    def vet(new: Config, current: Config) -> None:
        if not bundle.exists():
            raise ConfigError("providers.p.caFile: cannot be loaded")

    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    holder = ConfigHolder.from_file(path, os.environ)
    holder.vet = vet
    seen: list[str] = []
    path.write_text(text(2000))
    await config_watch.reread(holder, lambda name, _: seen.append(name), asyncio.Event())
    assert (seen, limit(holder)) == ([CONFIG_REJECTED], 1000)
    bundle.write_text("a bundle")
    await config_watch.reread(holder, lambda name, _: seen.append(name), asyncio.Event())
    assert (seen, limit(holder)) == ([CONFIG_REJECTED, CONFIG_RELOADED], 2000)


async def test_a_platform_without_sighup_starts_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows has no SIGHUP: the lifespan's first step asked for it, and the start failed
    with an ``AttributeError`` (``cascade-proxy migrate`` already looks before it takes it)."""
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    hangup = Hangup(ConfigHolder.from_file(path, os.environ))
    monkeypatch.delattr(signal, "SIGHUP")
    undo = hangup.install()
    undo()
