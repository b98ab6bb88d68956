"""docker-compose.yml gives the proxy longer than Docker's default 10 s to stop: on SIGTERM it
finishes the answers it is streaming first (README: Stopping;
tests/reliability/test_sigterm.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_compose_gives_the_proxy_longer_than_dockers_default_to_stop() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    cascade = text[text.index("\n  cascade:") :]
    grace = re.search(r"\n    stop_grace_period: (\d+)s\n", cascade)
    assert grace is not None, "the cascade service sets no stop_grace_period (Docker: 10 s)"
    assert int(grace.group(1)) >= 30
