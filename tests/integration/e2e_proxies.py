"""The proxies the end-to-end replay (test_e2e_properties.py) talks to, all on one database:
one, or several replicas of one deployment (``CASCADE_TEST_E2E_REPLICAS``) behind a load
balancer without session affinity, which sends each step to the next replica in turn or,
with ``CASCADE_TEST_E2E_PICK=random:<seed>``, to one drawn with that seed. Each replica keeps
its own per-process caches (hash chain, ingest memo, resent bodies, calibration), so a
session's consecutive requests meet caches another replica left behind."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, stop_all, write_config
from tests.integration.e2e_checks import Listener
from tests.integration.e2e_model import FAST, context_config

__all__ = ["PICK", "REPLICAS", "RESERVED", "Proxies", "check_same_events", "replay_settings"]

RESERVED = 1000
REPLICAS = int(os.environ.get("CASCADE_TEST_E2E_REPLICAS", "1"))
"""How many proxies serve the replay at once (each step goes to one of them)."""
PICK = os.environ.get("CASCADE_TEST_E2E_PICK", "alternate")
"""``alternate`` (each step to the next replica) or ``random:<seed>``."""


def replay_settings(
    tmp_path: Path, db_dsn: str, fake: FakeUpstream, limit: int, extras: bool
) -> Settings:
    """Every stage on at window ``limit``; with ``extras``, embeddings for retrieval."""
    models = {
        "default": {"contextLimit": limit, "reservedOutput": RESERVED},
        FAST: {"contextLimit": 128000},
    }
    extra: dict[str, Any] = {}
    if extras:
        extra["embedding"] = {"provider": "openai", "model": "text-embedding-fake"}
    path = write_config(
        tmp_path / "agents.json",
        fake.url,
        models=models,
        context=context_config(limit, extras=extras),
        **extra,
    )
    return Settings(
        database_url=db_dsn, config=path, keepalive_seconds=0.3, embedding_poll_seconds=0.1
    )


class Proxies:
    """``replicas`` proxies on one database and settings; :meth:`pick` names the one that
    serves the next step, :meth:`restart` replaces one by a fresh process (empty caches), and
    every one still running is stopped after the test."""

    def __init__(self, settings: Settings, replicas: int = 1, pick: str = "alternate") -> None:
        if pick != "alternate" and not pick.startswith("random:"):
            raise ValueError(f"CASCADE_TEST_E2E_PICK={pick!r}: alternate or random:<seed>")
        self.settings = settings
        self.servers: list[ProxyServer] = []
        self.replicas = max(1, replicas)
        self._rng = random.Random(int(pick[7:])) if pick.startswith("random:") else None
        self._next = 0

    def start(self) -> ProxyServer:
        """Start every replica; the first, where the replay listens for events."""
        self.stop()
        self.servers = [ProxyServer(self.settings).start() for _ in range(self.replicas)]
        return self.servers[0]

    def settings_used(self) -> Settings:
        """The settings the replicas run with (``ProxyServer`` may route them through a pooler)."""
        return self.servers[0].settings if self.servers else self.settings

    def pick(self) -> int:
        """The index of the replica that serves the next step."""
        if self._rng is not None:
            return self._rng.randrange(self.replicas)
        k, self._next = self._next, (self._next + 1) % self.replicas
        return k

    def restart(self, k: int) -> ProxyServer:
        """Replace replica ``k`` by a new process on the same database."""
        self.servers[k].stop()
        self.servers[k] = ProxyServer(self.settings).start()
        return self.servers[k]

    def stop(self) -> None:
        stop_all(self.servers)
        self.servers = []


def check_same_events(first: Listener, last: Listener) -> None:
    """Two replicas' streams of one session, opened together, carry the same events (5 s
    for the later to catch up): each replica's bus delivers what the other one made, the
    transient events included, which no replay of the stored ones would bring back."""

    def seen(listener: Listener) -> list[str]:
        return sorted(f"{n} {json.dumps(d, sort_keys=True)}" for n, d in listener.events)

    deadline = time.monotonic() + 5
    while seen(first) != seen(last) and time.monotonic() < deadline:
        time.sleep(0.05)
    a, b = seen(first), seen(last)
    assert a == b, f"only on the first replica: {sorted(set(a) - set(b))[:3]}, on the last:" + (
        f" {sorted(set(b) - set(a))[:3]}"
    )
