"""A database that takes the connection and never answers (a firewall that drops, a server
wedged, the wrong port of a service that waits for its client to speak first) ends the
wait with a line that says what happened: asyncpg's TimeoutError carries no message, and
the start's refusal read ``cannot connect to PostgreSQL at … (DATABASE_URL): TimeoutError: ``."""

from __future__ import annotations

import asyncio

import pytest

from proxy.store.db import DatabaseUnavailable, connect


async def test_a_database_that_never_answers_is_named_with_the_wait() -> None:
    held: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepted, never answered

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(DatabaseUnavailable) as refused:
            await connect(f"postgresql://u:pw-3@127.0.0.1:{port}/db", timeout=0.3)
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert str(refused.value) == (
        f"cannot connect to PostgreSQL at postgresql://u:***@127.0.0.1:{port}/db"
        " (DATABASE_URL): TimeoutError: no answer within 0.3 s"
    )
