"""The console's browser tests: Debian's chromium driven by Playwright, against a real proxy
(uvicorn on loopback, keys configured) and the fake upstream.

Playwright's own browser download is never used: the system's ``/usr/bin/chromium`` is
launched directly (.ci/run installs it). Without it the browser tests skip, saying so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config

CHROMIUM = os.environ.get("CASCADE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
KEY = "sk-console-test-key"
KEY_ENV = "CASCADE_KEY_CONSOLE_TEST"
TENANT = "team-ui"
LIMIT = 8000
MAX_CHARS = 1500
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium_missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM} (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (the test extra)"
    return None


def roomy_config(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    """Keys configured, a window a long session's whole history fits in, and no eviction: for
    the tests that open such a session, where only the test changes rows."""
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        models={"default": {"contextLimit": 1_000_000, "reservedOutput": 500}},
        auth={"keys": [{"keyEnv": KEY_ENV, "tenant": TENANT}]},
    )


ROOMY = pytest.mark.roomy
"""A module's or a test's mark: its proxy gets :func:`roomy_config`, where only the test
changes rows, not the console tests' small window."""


@pytest.fixture
def console_config(
    request: pytest.FixtureRequest, tmp_path: Path, fake_upstream: FakeUpstream
) -> Path:
    """Keys configured; a small window so eviction happens; results past MAX_CHARS are cut.
    A test marked :data:`ROOMY` gets :func:`roomy_config` instead."""
    if request.node.get_closest_marker("roomy") is not None:
        return roomy_config(tmp_path, fake_upstream)
    return write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        models={"default": {"contextLimit": LIMIT, "reservedOutput": 500}},
        auth={"keys": [{"keyEnv": KEY_ENV, "tenant": TENANT}]},
        context={
            "toolOutput": {"maxChars": MAX_CHARS},
            "eviction": {
                "enabled": True,
                "atFraction": 0.1,
                "keepRecentRounds": 1,
                "clearAtLeast": 10,
                "minResultTokens": 10,
            },
            "summarize": {"keepRecent": 2},
        },
    )


@pytest.fixture
def console_proxy(
    db_dsn: str, console_config: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ProxyServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    server = ProxyServer(
        Settings(database_url=db_dsn, config=console_config, keepalive_seconds=0.3)
    ).start()
    yield server
    server.stop()


class Page:
    """A browser page on the console, recording every URL it requests."""

    def __init__(self, page: Any, origin: str) -> None:
        self.page = page
        self.origin = origin
        self.urls: list[str] = []
        self.errors: list[str] = []
        page.on("request", lambda r: self.urls.append(r.url))
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on(
            "console",
            lambda m: (
                self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
            ),
        )

    def foreign(self) -> list[str]:
        """Requests to anything but the proxy (a ``data:`` URL is no request to a host)."""
        return [u for u in self.urls if not u.startswith((self.origin + "/", "data:"))]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One chromium for a test module: its start (Playwright's driver, then the browser) costs
    several times what a fresh context does. Each test gets a context of its own (``console``),
    so no cookie, storage, route or clock carries over from one test to the next.

    Sync Playwright marks its event loop as running on this thread for as long as it is
    started; the fixtures that run a loop of their own meanwhile (the per-test database) run
    it on another thread (``run_sync``)."""
    if reason := _chromium_missing():
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(
            executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True, timeout=20_000
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def console(console_proxy: ProxyServer, browser: Any) -> Iterator[Page]:
    """A fresh browser context and page on the console, for this test alone."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(10_000)
    page = Page(context.new_page(), console_proxy.origin)
    try:
        yield page
    finally:
        context.close()
    assert page.foreign() == [], "the console requested another host"
    assert [e for e in page.errors if e.startswith("page error")] == []
