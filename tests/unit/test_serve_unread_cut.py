"""The stop's reaper of unread connections (``server._Server._cut_unread``): it cuts a
connection whose client reads nothing, not one whose client reads slowly. A large answer
written at once (an export, a long non-streamed reply) keeps the writes paused, or the
transport closing with bytes unsent, for as long as the client takes to read all of it:
the state alone says the server waits on the client, not that the client stopped."""

from __future__ import annotations

import asyncio

import pytest
import uvicorn

from proxy import server as server_mod
from proxy.server import _Server


class _Transport:
    def __init__(self, unsent: int) -> None:
        self.unsent, self.aborted, self.aborts = unsent, False, 0

    def is_closing(self) -> bool:
        return True  # closed by the stop with ``unsent`` bytes still to go out

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def get_extra_info(self, name: str) -> None:
        return None  # no socket: the transport's own count alone

    def abort(self) -> None:
        self.aborted, self.aborts = True, self.aborts + 1
        self.unsent = 0  # dropped with the connection, which leaves the set a turn later


class _Connection:
    def __init__(self, unsent: int) -> None:
        self.transport = _Transport(unsent)


async def _reap(connections: list[_Connection], seconds: float, read: int) -> None:
    """Run the reaper for ``seconds`` while each client reads ``read`` bytes every 50 ms."""
    srv = _Server(uvicorn.Config(app=lambda scope, receive, send: None))
    srv.server_state.connections.update(connections)  # type: ignore[arg-type]
    reaper = asyncio.create_task(srv._cut_unread())
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        await asyncio.sleep(0.05)
        for c in connections:
            c.transport.unsent = max(0, c.transport.unsent - read)
    reaper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reaper


def test_a_client_reading_slowly_but_steadily_is_not_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server_mod, "UNREAD_SECONDS", 0.3)
    slow = _Connection(unsent=10_000_000)  # its buffer past the low-water mark throughout
    asyncio.run(_reap([slow], seconds=1.0, read=4096))
    assert not slow.transport.aborted


def test_a_client_reading_nothing_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_mod, "UNREAD_SECONDS", 0.3)
    frozen = _Connection(unsent=10_000_000)
    asyncio.run(_reap([frozen], seconds=1.0, read=0))
    assert frozen.transport.aborted


def test_a_connection_is_cut_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cut connection left in the set a while (its ``connection_lost`` still to come)
    is neither cut nor counted again, though its unsent bytes changed as it was cut."""
    monkeypatch.setattr(server_mod, "UNREAD_SECONDS", 0.3)
    frozen = _Connection(unsent=10_000_000)
    asyncio.run(_reap([frozen], seconds=1.0, read=0))
    assert frozen.transport.aborts == 1


class _Broken(_Transport):
    def get_write_buffer_size(self) -> int:
        raise RuntimeError("a transport that cannot say")


def test_one_connections_error_does_not_stop_the_reaper(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection the reaper cannot judge is left to the stop's wait, said once; the
    others are still cut: the reaper ended with the error, and the stop, cutting nothing
    more, waited on every frozen client until the orchestrator's kill."""
    monkeypatch.setattr(server_mod, "UNREAD_SECONDS", 0.3)
    broken, frozen = _Connection(unsent=1), _Connection(unsent=10_000_000)
    broken.transport = _Broken(unsent=1)
    asyncio.run(_reap([broken, frozen], seconds=1.0, read=0))
    assert frozen.transport.aborted and not broken.transport.aborted
    said = [r.getMessage() for r in caplog.records if "cannot judge" in r.getMessage()]
    assert len(said) == 1
