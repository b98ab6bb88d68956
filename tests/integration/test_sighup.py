"""``cascade-proxy serve`` sent SIGHUP (``systemctl reload``, ``kill -HUP``, a closed terminal):
the config file is judged at once, as a save is, and the process goes on serving; Python's
default would end it on the spot, cutting the streams in flight (README: Configuration)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.replies import Pacer, reply
from tests.fakes.upstream import FakeUpstream
from tests.reliability.conftest import ProxyProcess, proxy_process, write_config

__all__ = ["proxy_process"]  # the fixture (tests/reliability's), for pytest to find

AUTH = {"authorization": "Bearer sk-test-client"}


def _wait_for_line(log: Path, text: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if text in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no line with {text!r} in:\n{log.read_text()[-3000:]}")


def test_sighup_rereads_the_config_and_the_stream_in_flight_goes_on(
    proxy_process: Callable[..., ProxyProcess], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "agents.json", fake_upstream.url)
    # no watcher: what reloads the file below is the signal alone
    p = proxy_process(config, CASCADE_WATCH_CONFIG="false")
    pacer = Pacer()
    fake_upstream.default = reply("kept " * 20, chunks=20, pacer=pacer)
    pacer.allow(2)
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    lines: list[str] = []
    with (
        httpx.Client(base_url=p.origin, timeout=30, headers={**AUTH, "x-session-id": "h1"}) as c,
        c.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            lines.append(line)
            if len(lines) == 5:  # mid-answer
                p.proc.send_signal(signal.SIGHUP)
                _wait_for_line(p.log, "SIGHUP: config")
                pacer.allow(100)
    assert [line for line in lines if line][-1] == "data: [DONE]"
    assert p.proc.poll() is None
    assert "unchanged since it was last read" in _wait_for_line(p.log, "SIGHUP: config")

    write_config(config, fake_upstream.url, models={"default": {"contextLimit": 64000}})
    p.proc.send_signal(signal.SIGHUP)
    assert "reloaded" in _wait_for_line(p.log, "cascade.config: config")
    chat = httpx.post(
        f"{p.origin}/v1/chat/completions",
        headers={**AUTH, "x-session-id": "h1"},
        json={**body, "stream": False, "messages": [{"role": "user", "content": "again"}]},
        timeout=10,
    )
    assert chat.status_code == 200, chat.text
    after = httpx.get(f"{p.origin}/v1/sessions/h1", headers=AUTH, timeout=10).json()
    assert after["context_limit"] == 64000
    assert p.proc.poll() is None


async def test_the_lifespan_takes_sighup_from_its_first_step_to_its_last(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python's default for SIGHUP ends the process on the spot: during a long start (the
    migrations) or the stop, that leaves the embedded PostgreSQL running."""
    from proxy import app as app_module
    from proxy.app import create_app
    from proxy.settings import Settings

    taken: dict[str, bool] = {}

    def is_taken() -> bool:
        return signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, None)

    migrate = app_module.run_migrations

    async def migrating(*args: Any, **kwargs: Any) -> Any:
        taken["start"] = is_taken()
        return await migrate(*args, **kwargs)

    class Observed(app_module.Observer):
        def close(self) -> None:
            taken["stop"] = is_taken()
            super().close()

    monkeypatch.setattr(app_module, "run_migrations", migrating)
    monkeypatch.setattr(app_module, "Observer", Observed)
    app = create_app(Settings(database_url=db_dsn, watch_config=False, pool_max_size=2))
    async with app.router.lifespan_context(app):
        taken["serving"] = is_taken()
    assert taken == {"start": True, "serving": True, "stop": True}
    assert not is_taken()
