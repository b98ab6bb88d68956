"""A persisted event's notification carries its tenant and session id beside its data,
inline up to the trigger's bound (migration 0004): past NOTIFY's 8000 bytes the INSERT
itself fails, the request's write with it, on a session some stream watches. A proxy key's
tenant is the one unbounded part, so the config bounds it (``config.TENANT_MAX_BYTES``)."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from proxy.bus import EventBus
from proxy.cascade.types import USAGE
from proxy.config import TENANT_MAX_BYTES, ConfigError, parse_config
from tests.integration.store.helpers import create_session

INLINE = 7400
"""The most bytes of data the trigger puts in a notification (migration 0004)."""


def _keyed(tenant: str) -> dict[str, object]:
    return {"auth": {"keys": [{"keyEnv": "K", "tenant": tenant}]}}


async def test_the_longest_tenant_a_key_takes_still_announces_the_largest_inline_event(
    pool: asyncpg.Pool, db_dsn: str
) -> None:
    tenant = '"' * (TENANT_MAX_BYTES // 2)  # each one escaped in the payload: two bytes
    (key,) = parse_config(_keyed(tenant), env={"K": "k"}).auth.keys
    sid = "s" * 128  # the longest session id
    await create_session(pool, tenant=key.tenant, session_id=sid, agent="default", model="m")
    bus = EventBus(pool, db_dsn)
    await bus.start()
    try:
        async with bus.subscribe(key.tenant, sid) as queue:
            pad = "a" * (INLINE - 200)
            data = {"pad": pad}
            while len(json.dumps({**data, "session_id": sid, "ts": "x" * 32})) < INLINE:
                data["pad"] += "a"
            await bus.publish(pool, tenant=key.tenant, session_id=sid, name=USAGE, data=data)
            event = await asyncio.wait_for(queue.get(), 5)
            assert event.data["pad"] == data["pad"]
    finally:
        await bus.stop()


def test_a_tenant_past_the_bound_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"auth\.keys\[0\]\.tenant"):
        parse_config(_keyed("x" * 700), env={"K": "k"})
    with pytest.raises(ConfigError, match=r"auth\.keys\[0\]\.tenant"):
        parse_config(_keyed("é" * (TENANT_MAX_BYTES // 2 + 1)), env={"K": "k"})  # 2 bytes each
