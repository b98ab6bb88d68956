"""A listen URL that is no PostgreSQL URL at all refuses the start at once, as a wrong
password does (tests/integration/test_bus_refusals.py): no retry can make asyncpg read it."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

from proxy.bus import EventBus
from proxy.store.db import DatabaseUnavailable


@pytest.mark.parametrize("url", ["notaurl:SECRET@x", "postgresql://u:SECRET@h:port/x"])
async def test_a_listen_url_asyncpg_cannot_read_refuses_the_start_at_once(url: str) -> None:
    # Regression: retried every second for 30 s, a warning each time, before the refusal.
    bus = EventBus(cast(Any, None), url, "DATABASE_LISTEN_URL")  # the pool is never reached
    started = time.monotonic()
    said = r"\(DATABASE_LISTEN_URL\): (ClientConfigurationError|ValueError): "
    with pytest.raises(DatabaseUnavailable, match=said) as e:
        await bus.start(timeout=10)
    assert time.monotonic() - started < 5
    assert "SECRET" not in str(e.value)
