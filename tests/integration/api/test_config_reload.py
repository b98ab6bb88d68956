"""config/agents.json hot reload (DESIGN §7): applied on save without a restart, or rejected
with the reason while the previous config stays in force; both announced on open streams."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy import app as app_module, config_watch
from proxy.cascade.types import CONFIG_REJECTED, CONFIG_RELOADED, USAGE
from proxy.config import Config, load_config
from proxy.config_watch import ConfigHolder, watch_config
from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.test_events import Frame, chat, open_events, user

OLD_LIMIT = 100_000
NEW_LIMIT = 64_000
POLLS = 200  # of 0.1 s: what the watcher does off-path has up to 20 s on a loaded machine


async def _watching(holder: ConfigHolder, task: asyncio.Task[None]) -> None:
    """Until the watcher read the bytes it compares every later change with (a save or
    a delete before that would be taken as the file it started from, and never seen)."""
    for _ in range(POLLS * 10):
        if holder.judged is not None or task.done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the watcher never read the config")


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    return write_config(
        tmp_path / "agents.json", fake_upstream.url, models={"default": {"contextLimit": OLD_LIMIT}}
    )


@pytest.fixture
def second_upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


def save(path: Path, text: str | bytes) -> None:
    """Save the way editors do: write a temp file, rename it over the config."""
    tmp = path.with_name(path.name + ".swp")
    tmp.write_bytes(text if isinstance(text, bytes) else text.encode())
    os.replace(tmp, path)


def save_config(path: Path, upstream_url: str, limit: int, *, in_place: bool = False) -> None:
    tmp = path.with_name("next.json")
    write_config(tmp, upstream_url, models={"default": {"contextLimit": limit}})
    if in_place:
        path.write_text(tmp.read_text())
    else:
        save(path, tmp.read_text())


def limit_of(proxy: ProxyServer, sid: str) -> int:
    headers = {"authorization": "Bearer sk-test-client"}
    resp = httpx.get(f"{proxy.origin}/v1/sessions/{sid}", headers=headers, timeout=5)
    assert resp.status_code == 200, resp.text
    return int(resp.json()["context_limit"])


def named(name: str) -> Any:
    return lambda frame: frame.event == name


def assert_config_frame(frame: Frame, sid: str) -> None:
    assert frame.id is None  # config.* events are broadcast, not session history
    assert frame.data["session_id"] == sid
    assert frame.data["ts"]


def test_valid_change_applies_to_next_request_and_is_announced(
    proxy: ProxyServer,
    config_path: Path,
    fake_upstream: FakeUpstream,
    second_upstream: FakeUpstream,
) -> None:
    a1 = chat(proxy.origin, "a", [user("u1")])
    chat(proxy.origin, "b", [user("other")])
    assert limit_of(proxy, "a") == OLD_LIMIT
    with open_events(proxy.origin, "a") as stream_a, open_events(proxy.origin, "b") as stream_b:
        stream_a.until(named(USAGE))  # replay seen: both streams are subscribed
        stream_b.until(named(USAGE))
        save_config(config_path, second_upstream.url, NEW_LIMIT)
        reloaded_a = stream_a.until(named(CONFIG_RELOADED))[-1]
        reloaded_b = stream_b.until(named(CONFIG_RELOADED))[-1]
        assert_config_frame(reloaded_a, "a")
        assert_config_frame(reloaded_b, "b")
        assert reloaded_a.data["path"] == str(config_path)

        before = len(fake_upstream.bodies())
        a2 = chat(proxy.origin, "a", [user("u1"), a1, user("u2")])
        usage = stream_a.until(named(USAGE))[-1]
        assert len(fake_upstream.bodies()) == before
        assert second_upstream.bodies()[-1]["messages"][-1] == user("u2")
        assert usage.data["limit"] == NEW_LIMIT
        assert limit_of(proxy, "a") == NEW_LIMIT
        # the first provider's pool is closed, not kept open until shutdown
        ports = {key[2] for key in proxy.state("upstream").client._transport._pools}
        assert ports == {httpx.URL(second_upstream.url).port}

        # a plain in-place write (no rename) is picked up as well
        save_config(config_path, fake_upstream.url, OLD_LIMIT, in_place=True)
        stream_a.until(named(CONFIG_RELOADED))
        chat(proxy.origin, "a", [user("u1"), a1, user("u2"), a2, user("u3")])
        usage = stream_a.until(named(USAGE))[-1]
    assert fake_upstream.bodies()[-1]["messages"][-1] == user("u3")
    assert len(second_upstream.bodies()) == 1
    assert usage.data["limit"] == OLD_LIMIT


INVALID: list[tuple[str | bytes, str]] = [
    ("{ this is not json", "not valid JSON"),
    (b'{"models": {"default": {"contextLimit": 9\xff}}}', "not UTF-8"),
    ('{"contxt": {}}', "contxt"),
    ('{"context": {"eviction": {"atFraction": 7}}}', "atFraction"),
    ('{"agents": {"default": {"provider": "nowhere"}}}', "nowhere"),
    (
        '{"models": {"gpt-x": {"contextLimit": 8000, "reservedOutput": 8000}}}',
        "models.gpt-x.reservedOutput (8000) must be less than its contextLimit (8000)",
    ),
    (  # accepted, and the key was only ever the first entry's: tenant a, never b
        '{"auth": {"keys": [{"keyEnv": "K_A", "tenant": "a"}, {"keyEnv": "K_A", "tenant": "b"}]}}',
        "auth.keys[1].keyEnv: $K_A is auth.keys[0]'s too",
    ),
    (  # accepted, and that proxy key opened /metrics, which counts every tenant's traffic
        '{"auth": {"keys": [{"keyEnv": "K_A", "tenant": "a"}], "metricsKeyEnv": "K_A"}}',
        "auth.metricsKeyEnv: $K_A is auth.keys[0]'s keyEnv",
    ),
    (  # accepted, and each of the key's requests failed storing its session
        '{"auth": {"keys": [{"keyEnv": "K_A", "tenant": "a\\u0000b"}]}}',
        "auth.keys[0].tenant: holds a NUL",
    ),
    (  # accepted, and each event of the key's sessions failed its NOTIFY
        '{"auth": {"keys": [{"keyEnv": "K_A", "tenant": "' + "t" * 257 + '"}]}}',
        "auth.keys[0].tenant: longer than 256 bytes",
    ),
    (  # accepted, and each of the provider's requests was a 502 naming the file
        '{"providers": {"p": {"baseUrl": "https://p.example", "caFile": "/nonexistent/ca.pem"}}}',
        "providers.p.caFile: /nonexistent/ca.pem cannot be loaded",
    ),
]


def test_invalid_file_is_rejected_and_previous_config_stays(
    proxy: ProxyServer,
    config_path: Path,
    fake_upstream: FakeUpstream,
    second_upstream: FakeUpstream,
) -> None:
    history = [user("u0")]
    history.append(chat(proxy.origin, "s", history))
    with open_events(proxy.origin, "s") as events:
        events.until(named(USAGE))
        for i, (text, reason) in enumerate(INVALID, start=1):
            save(config_path, text)
            rejected = events.until(named(CONFIG_REJECTED))[-1]
            assert_config_frame(rejected, "s")
            assert reason in rejected.data["reason"]

            # the old config is still in force: same upstream, same limits
            history.append(user(f"u{i}"))
            history.append(chat(proxy.origin, "s", history))
            assert fake_upstream.bodies()[-1]["messages"][-1] == user(f"u{i}")
            assert events.until(named(USAGE))[-1].data["limit"] == OLD_LIMIT
            assert limit_of(proxy, "s") == OLD_LIMIT
        assert second_upstream.bodies() == []

        # fixing the file applies it
        save_config(config_path, second_upstream.url, NEW_LIMIT)
        events.until(named(CONFIG_RELOADED))
    chat(proxy.origin, "s", [*history, user("fixed")])
    assert second_upstream.bodies()[-1]["messages"][-1] == user("fixed")
    assert limit_of(proxy, "s") == NEW_LIMIT


async def test_only_the_config_file_itself_is_watched(tmp_path: Path) -> None:
    """Writes below the config's directory (a data directory kept beside it, a copy of the
    file in a subfolder) neither reload the config nor wake the watcher; the file itself
    does."""
    path = write_config(tmp_path / "agents.json", "http://127.0.0.1:9/v1")
    sub = tmp_path / "data"
    sub.mkdir()
    holder = ConfigHolder(load_config(path, os.environ), path)
    seen: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(watch_config(holder, lambda name, _: seen.append(name), stop))
    await _watching(holder, task)
    # time for its watch to arm (nothing tells): armed late, the writes below go unheard
    # and the test proves less, but it never fails for it
    await asyncio.sleep(0.3)
    for i in range(20):
        (sub / "agents.json").write_text(path.read_text())
        (sub / f"segment-{i}").write_bytes(b"x" * 100)
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.6)  # past the debounce
    assert seen == []
    save_config(path, "http://127.0.0.1:9/v1", NEW_LIMIT)
    for _ in range(POLLS):
        if seen:
            break
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(task, 20)
    assert seen == [CONFIG_RELOADED]


async def test_a_config_mounted_as_a_kubernetes_configmap_reloads_on_every_update(
    tmp_path: Path,
) -> None:
    """A ConfigMap volume: ``agents.json -> ..data/agents.json``, ``..data -> ..<stamp>``;
    an update writes a new stamped directory, swaps ``..data`` by rename and deletes the
    old one. The watcher used to follow the resolved path into the deleted directory and
    hear no update after the first."""
    url = "http://127.0.0.1:9/v1"

    def publish(stamp: str, limit: int) -> None:
        (tmp_path / stamp).mkdir()
        save_config(tmp_path / stamp / "agents.json", url, limit)
        (tmp_path / "..data_tmp").symlink_to(stamp)
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")

    publish("..stamp_1", 5000)
    path = tmp_path / "agents.json"
    path.symlink_to("..data/agents.json")
    holder = ConfigHolder(load_config(path, os.environ), path)
    seen: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(watch_config(holder, lambda name, _: seen.append(name), stop))
    await _watching(holder, task)
    for n, (stamp, old) in enumerate([("..stamp_2", "..stamp_1"), ("..stamp_3", "..stamp_2")]):
        publish(stamp, NEW_LIMIT + n)
        for child in (tmp_path / old).iterdir():
            child.unlink()
        (tmp_path / old).rmdir()
        for _ in range(POLLS):
            if holder.current.model_limits("m").context_limit == NEW_LIMIT + n:
                break
            await asyncio.sleep(0.1)
        assert holder.current.model_limits("m").context_limit == NEW_LIMIT + n
    stop.set()
    await asyncio.wait_for(task, 20)
    assert seen == [CONFIG_RELOADED, CONFIG_RELOADED]


async def test_a_deleted_config_is_rejected_once_until_it_is_back(tmp_path: Path) -> None:
    """Moving the file away is one rejection; other files changing in its directory while
    it is missing are not more (each was a config.rejected on every open stream)."""
    path = write_config(tmp_path / "agents.json", "http://127.0.0.1:9/v1")
    holder = ConfigHolder(load_config(path, os.environ), path)
    seen: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(watch_config(holder, lambda name, _: seen.append(name), stop))
    await _watching(holder, task)
    os.replace(path, tmp_path / "agents.json.bak")
    for _ in range(POLLS):
        if seen:
            break
        await asyncio.sleep(0.1)
    for i in range(3):
        (tmp_path / "notes.txt").write_text(str(i))
        await asyncio.sleep(0.4)  # past the debounce: each write is a change of its own
    os.replace(tmp_path / "agents.json.bak", path)
    for _ in range(POLLS):
        if len(seen) > 1:
            break
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(task, 20)
    assert seen == [CONFIG_REJECTED, CONFIG_RELOADED]


async def test_an_unexpected_reload_error_does_not_stop_the_watcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path / "agents.json", "http://127.0.0.1:9/v1")
    holder = ConfigHolder(load_config(path, os.environ), path)
    real = config_watch.load_config
    calls: list[int] = []

    def flaky(*args: Any) -> Config:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in the loader")
        return real(*args)

    async def until(done: Any) -> None:
        for _ in range(POLLS):
            if done():
                return
            await asyncio.sleep(0.1)

    monkeypatch.setattr(config_watch, "load_config", flaky)
    seen: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(watch_config(holder, lambda name, _: seen.append(name), stop))
    await _watching(holder, task)
    save_config(path, "http://127.0.0.1:9/v1", NEW_LIMIT)
    await until(lambda: calls)
    await asyncio.sleep(0.4)  # past the debounce: the failed reload is behind us
    save_config(path, "http://127.0.0.1:9/v1", NEW_LIMIT + 1)
    await until(lambda: seen)
    stop.set()
    await asyncio.wait_for(task, 20)
    assert seen == [CONFIG_RELOADED]
    assert holder.current.model_limits("m").context_limit == NEW_LIMIT + 1


async def test_a_file_nested_past_the_recursion_limit_is_rejected_and_watching_goes_on(
    tmp_path: Path,
) -> None:
    """The settle check's parse of a file nested 10,000 levels raised RecursionError (no
    ValueError) outside the reload's guard: it ended the watcher, and no save was applied
    again for the life of the process. Now it is a file that does not parse: rejected, and
    the next save applied."""
    path = write_config(tmp_path / "agents.json", "http://127.0.0.1:9/v1")
    holder = ConfigHolder(load_config(path, os.environ), path)
    seen: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(watch_config(holder, lambda name, _: seen.append(name), stop))
    await _watching(holder, task)
    save(path, '{"models": ' + "[" * 10_000 + "]" * 10_000 + "}")
    for _ in range(POLLS):
        if seen or task.done():
            break
        await asyncio.sleep(0.1)
    save_config(path, "http://127.0.0.1:9/v1", NEW_LIMIT)
    for _ in range(POLLS):
        if len(seen) > 1 or task.done():
            break
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(task, 20)
    assert seen == [CONFIG_REJECTED, CONFIG_RELOADED]
    assert holder.current.model_limits("m").context_limit == NEW_LIMIT


async def test_shutdown_completes_after_the_watcher_failed(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: Any) -> None:
        raise OSError("the config directory is gone")

    monkeypatch.setattr(app_module, "watch_config", broken)
    app = app_module.create_app(settings)
    async with app.router.lifespan_context(app) as state:
        await asyncio.sleep(0.05)  # the watcher task has failed by now
        pool = state["pool"]
    assert pool.is_closing()  # the steps after the watcher's ran
