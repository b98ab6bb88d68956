"""How editors and deployers save config/agents.json, as the hot reload sees it: each save is
one ``config.reloaded`` (or one ``config.rejected`` for a file that stays broken), never a
refusal of a state the file only passed through."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from proxy import config_watch
from proxy.cascade.types import CONFIG_REJECTED, CONFIG_RELOADED
from proxy.config import load_config
from proxy.config_watch import ConfigHolder, watch_config


def text(limit: int) -> str:
    return json.dumps({"models": {"default": {"contextLimit": limit}}}, indent=2)


def limit(holder: ConfigHolder) -> int:
    return holder.current.model_limits("m").context_limit


async def until(done: Callable[[], bool], seconds: float = 5) -> None:
    for _ in range(int(seconds * 20)):
        if done():
            return
        await asyncio.sleep(0.05)


@asynccontextmanager
async def watching(path: Path, seen: list[str]) -> AsyncIterator[ConfigHolder]:
    holder = ConfigHolder(load_config(path, os.environ), path)
    stop = asyncio.Event()
    task = asyncio.create_task(watch_config(holder, lambda name, _: seen.append(name), stop))
    await asyncio.sleep(0.3)  # the watcher is up
    try:
        yield holder
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_a_truncate_then_write_save_is_one_reload(tmp_path: Path) -> None:
    """An editor that saves in place (truncate, then write) passes through an empty and a
    cut-off file; with pauses between the writes, refusing each would be a
    ``config.rejected`` on every open stream and a warning in the log, for a save that is
    fine."""
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    seen: list[str] = []
    async with watching(path, seen) as holder:
        new = text(2000)
        with path.open("w") as f:  # truncated
            f.flush()
            await asyncio.sleep(0.4)  # past the debounce: a change of its own
            f.write(new[:20])
            f.flush()
            await asyncio.sleep(0.4)
            f.write(new[20:])
        await until(lambda: bool(seen))
        await asyncio.sleep(1.5)  # nothing more comes
    assert seen == [CONFIG_RELOADED]
    assert limit(holder) == 2000


async def test_a_deleted_then_recreated_config_is_one_reload(tmp_path: Path) -> None:
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    seen: list[str] = []
    async with watching(path, seen) as holder:
        path.unlink()
        await asyncio.sleep(0.4)
        path.write_text(text(2000))
        await until(lambda: bool(seen))
        await asyncio.sleep(1.5)
    assert seen == [CONFIG_RELOADED]
    assert limit(holder) == 2000


async def test_a_file_that_stays_broken_is_still_rejected_once(tmp_path: Path) -> None:
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    seen: list[str] = []
    async with watching(path, seen) as holder:
        path.write_text("")
        await until(lambda: bool(seen))
        path.write_text(text(1000)[:20])
        await until(lambda: len(seen) > 1)
        await asyncio.sleep(1.5)
    assert seen == [CONFIG_REJECTED, CONFIG_REJECTED]
    assert limit(holder) == 1000


async def test_a_config_linked_from_another_directory_reloads_when_its_target_changes(
    tmp_path: Path,
) -> None:
    """``config/agents.json -> /etc/cascade/agents.json`` (or a dotfiles checkout): the
    file is edited where it lives, which the link's directory never hears of; and once the
    link is pointed at another file, that file's edits count."""
    here, there, elsewhere = (tmp_path / name for name in ("config", "etc", "other"))
    for directory in (here, there, elsewhere):
        directory.mkdir()
    (there / "agents.json").write_text(text(1000))
    path = here / "agents.json"
    path.symlink_to(there / "agents.json")
    seen: list[str] = []
    async with watching(path, seen) as holder:
        (there / "agents.json").write_text(text(2000))  # in place
        await until(lambda: limit(holder) == 2000)
        assert limit(holder) == 2000
        (there / "next.json").write_text(text(3000))  # renamed over it
        os.replace(there / "next.json", there / "agents.json")
        await until(lambda: limit(holder) == 3000)
        assert limit(holder) == 3000
        (elsewhere / "agents.json").write_text(text(4000))
        (here / "link.tmp").symlink_to(elsewhere / "agents.json")
        os.replace(here / "link.tmp", path)  # the link now points elsewhere
        await until(lambda: limit(holder) == 4000)
        (elsewhere / "agents.json").write_text(text(5000))
        await until(lambda: limit(holder) == 5000)
        assert limit(holder) == 5000
    assert seen == [CONFIG_RELOADED] * 4


async def test_a_change_no_event_announced_is_found_by_the_recheck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some file systems tell the watcher nothing, or not every change: a network share,
    Docker Desktop's shared folders, WSL2 (where watchfiles polls, and a second save within
    the same second as the one before it goes unseen). Here the file is rewritten through a
    hard link in another directory, of which the config's directory hears nothing."""
    monkeypatch.setattr(config_watch, "RECHECK_SECONDS", 0.5)
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    hidden = tmp_path / "elsewhere"
    hidden.mkdir()
    os.link(path, hidden / "agents.json")
    seen: list[str] = []
    async with watching(path, seen) as holder:
        with (hidden / "agents.json").open("r+") as f:  # the same file, written in place
            f.write(text(2000))
        await until(lambda: bool(seen))
    assert seen == [CONFIG_RELOADED]
    assert limit(holder) == 2000


async def test_the_bytes_judged_complete_are_the_bytes_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor may begin its next save between the watcher judging the file complete and
    the load: the load read the file again, and refused the cut-off state it found."""
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    real = config_watch._settled
    calls: list[int] = []

    async def then_the_next_save_begins(at: Path, now: bytes | None, stop: Any) -> Any:
        judged = await real(at, now, stop)
        if not calls:
            calls.append(1)
            at.write_text(text(3000)[:10])
        return judged

    monkeypatch.setattr(config_watch, "_settled", then_the_next_save_begins)
    seen: list[str] = []
    async with watching(path, seen) as holder:
        (tmp_path / "next.json").write_text(text(2000))
        os.replace(tmp_path / "next.json", path)
        await until(lambda: bool(seen))
        assert seen == [CONFIG_RELOADED]
        assert limit(holder) == 2000
        path.write_text(text(3000))  # the next save completes
        await until(lambda: len(seen) > 1)
    assert seen == [CONFIG_RELOADED, CONFIG_RELOADED]
    assert limit(holder) == 3000


async def test_a_link_target_gone_as_the_watch_begins_does_not_end_hot_reload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ConfigMap updated twice in quick succession deletes the directory the link pointed
    into just as the watch on it begins: watchfiles raises, which must end neither the
    watcher nor, with it, hot reload for the life of the process."""
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    real = config_watch._directories
    calls: list[int] = []

    def first_one_gone(at: Path) -> tuple[Path, ...]:
        calls.append(1)
        return (at.parent, tmp_path / "..2026_gone") if len(calls) == 1 else real(at)

    monkeypatch.setattr(config_watch, "_directories", first_one_gone)
    seen: list[str] = []
    async with watching(path, seen) as holder:
        (tmp_path / "next.json").write_text(text(2000))
        os.replace(tmp_path / "next.json", path)
        await until(lambda: bool(seen))
    assert seen == [CONFIG_RELOADED]
    assert limit(holder) == 2000


async def test_a_save_made_during_the_start_is_reloaded(tmp_path: Path) -> None:
    """The config is read before the database starts and the watcher starts after it: a
    save in between was taken for the file already loaded, so the proxy ran the old config
    (or never said that the new one was refused) until the next save."""
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    holder = ConfigHolder.from_file(path, os.environ)
    path.write_text(text(2000))  # saved while the start goes on
    seen: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(watch_config(holder, lambda name, _: seen.append(name), stop))
    try:
        await until(lambda: bool(seen))
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert seen == [CONFIG_RELOADED]
    assert limit(holder) == 2000


async def test_a_reread_while_the_watcher_waits_on_a_broken_file_judges_it_once(
    tmp_path: Path,
) -> None:
    """SIGHUP (``config_watch.reread``) during the watcher's wait for a file that does not
    parse to settle: one ``config.rejected``, not one each."""
    path = tmp_path / "agents.json"
    path.write_text(text(1000))
    seen: list[str] = []
    async with watching(path, seen) as holder:
        path.write_text(text(2000)[:20])
        await asyncio.sleep(0.4)  # the watcher saw it, and waits for it to settle
        await config_watch.reread(holder, lambda name, _: seen.append(name), asyncio.Event())
        await asyncio.sleep(0.3)  # a second judgement, if either made one
    assert seen == [CONFIG_REJECTED]
    assert limit(holder) == 1000


async def test_a_config_under_a_linked_directory_reloads_when_that_link_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--config /srv/app/current/config/agents.json`` with ``current -> releases/1`` (a
    deploy's), or a ConfigMap's ``..data`` named in the path: pointing the link at another
    release changes no file in the directory watched through it, so the save waited for the
    recheck, and edits to the new release's file were never announced either."""
    monkeypatch.setattr(config_watch, "RECHECK_SECONDS", 30.0)
    for release, value in (("1", 1000), ("2", 2000)):
        (tmp_path / "releases" / release).mkdir(parents=True)
        (tmp_path / "releases" / release / "agents.json").write_text(text(value))
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "1")
    seen: list[str] = []
    async with watching(tmp_path / "current" / "agents.json", seen) as holder:
        (tmp_path / "next").symlink_to(tmp_path / "releases" / "2")
        os.replace(tmp_path / "next", tmp_path / "current")
        await until(lambda: limit(holder) == 2000, 1.5)
        assert limit(holder) == 2000
        (tmp_path / "releases" / "2" / "agents.json").write_text(text(3000))
        await until(lambda: limit(holder) == 3000, 1.5)
        assert limit(holder) == 3000
    assert seen == [CONFIG_RELOADED] * 2


@pytest.mark.parametrize("broken", ["a loop", "a release not there yet"])
async def test_a_linked_directory_pointed_nowhere_for_a_while_keeps_the_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """``current`` made a link loop, or pointed at a release before it is unpacked: the
    config is refused (unreadable), and the watch stays on the directory holding the link,
    so the link put right reloads. Watching the broken link itself failed, which ended the
    watcher for the life of the process."""
    monkeypatch.setattr(config_watch, "RECHECK_SECONDS", 30.0)
    for release in ("1", "2"):
        (tmp_path / "releases" / release).mkdir(parents=True)
        (tmp_path / "releases" / release / "agents.json").write_text(text(1000 * int(release)))
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "1")
    nowhere = tmp_path / ("current" if broken == "a loop" else "releases/3")
    seen: list[str] = []
    async with watching(tmp_path / "current" / "agents.json", seen) as holder:
        for target in (nowhere, tmp_path / "releases" / "2"):
            (tmp_path / "next").symlink_to(target)
            os.replace(tmp_path / "next", tmp_path / "current")
            await until(lambda: len(seen) == (1 if target == nowhere else 2), 2.5)  # noqa: B023
        assert limit(holder) == 2000
    assert seen == [CONFIG_REJECTED, CONFIG_RELOADED]


def test_a_linked_directory_held_where_the_proxy_cannot_read_is_not_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory the process may not read cannot be watched (inotify needs read access):
    asking would fail the watch of the directories that can, so it is left to the recheck."""
    (tmp_path / "releases" / "1").mkdir(parents=True)
    (tmp_path / "releases" / "1" / "agents.json").write_text(text(1000))
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "1")
    path = tmp_path / "current" / "agents.json"
    own = (tmp_path / "releases" / "1").resolve()
    assert config_watch._directories(path) == (own, tmp_path.resolve())
    monkeypatch.setattr(config_watch.os, "access", lambda p, mode: Path(p) != tmp_path.resolve())
    assert config_watch._directories(path) == (own,)


def _inotify_watches() -> int:
    found = 0
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            with open(f"/proc/self/fdinfo/{fd}") as info:
                found += sum(1 for line in info if line.startswith("inotify wd:"))
        except OSError:  # closed since listed
            pass
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fdinfo"), reason="Linux's inotify")
async def test_a_configmap_updated_again_and_again_holds_the_same_watches(
    tmp_path: Path,
) -> None:
    """A ConfigMap swaps its ``..data`` link on every update, to a new directory each time:
    the watch moves to each, and the old one's is let go, so the process's inotify watches
    (a per-user limit) stay as many however often it is updated."""
    (tmp_path / "..v0").mkdir()
    (tmp_path / "..v0" / "agents.json").write_text(text(1000))
    (tmp_path / "..data").symlink_to("..v0")
    (tmp_path / "agents.json").symlink_to("..data/agents.json")
    seen: list[str] = []
    async with watching(tmp_path / "agents.json", seen) as holder:
        held = _inotify_watches()
        for update in range(1, 9):
            new = tmp_path / f"..v{update}"
            new.mkdir()
            (new / "agents.json").write_text(text(1000 + update))
            (tmp_path / "..tmp").symlink_to(new.name)
            os.replace(tmp_path / "..tmp", tmp_path / "..data")
            old = tmp_path / f"..v{update - 1}"
            (old / "agents.json").unlink()
            old.rmdir()
            await until(lambda: limit(holder) == 1000 + update, 2)  # noqa: B023
            assert limit(holder) == 1000 + update
            assert _inotify_watches() == held
    assert seen == [CONFIG_RELOADED] * 8
