"""The store tests' connection: one pooled connection with the session ``S`` of tenant ``T``
created (a module that needs other rows defines its own ``conn``)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.integration.store.helpers import S, T, create_session


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        await create_session(c, tenant=T, session_id=S, agent="default", model="m")
        yield c
