"""A start-up refusal is one line, through a middleware: starlette's router is not patched."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Router
from starlette.types import Message

from proxy.app import create_app
from proxy.config import ConfigError
from proxy.refusals import StartupRefusals
from proxy.settings import Settings


def test_the_refusal_is_a_middleware_and_the_router_is_starlettes_own() -> None:
    app = create_app(Settings(database_url="postgresql://x@127.0.0.1:1/x", watch_config=False))
    assert "lifespan" not in vars(app.router)  # nothing assigned over the instance's method
    assert type(app.router).lifespan is Router.lifespan
    assert StartupRefusals in [m.cls for m in app.user_middleware]


def _failing_app(exc: BaseException) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        raise exc
        yield

    return Starlette(lifespan=lifespan, middleware=[Middleware(StartupRefusals)])


async def _start(app: Starlette) -> tuple[list[Message], BaseException]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    with pytest.raises(BaseException) as raised:
        await app(scope, receive, send)
    return sent, raised.value


async def test_a_refusal_is_logged_once_and_the_server_gets_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="cascade"):
        sent, raised = await _start(_failing_app(ConfigError("CASCADE_X is wrong")))
    assert isinstance(raised, ConfigError)
    assert sent == [{"type": "lifespan.startup.failed", "message": ""}]
    said = [r.getMessage() for r in caplog.records if r.name.startswith("cascade")]
    assert said == ["cannot start: CASCADE_X is wrong"]


async def test_any_other_failure_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """A bug is not a refusal: uvicorn logs the traceback starlette formatted."""
    with caplog.at_level(logging.ERROR, logger="cascade"):
        sent, raised = await _start(_failing_app(RuntimeError("a bug")))
    assert isinstance(raised, RuntimeError)
    [failed] = sent
    assert failed["type"] == "lifespan.startup.failed"
    assert "Traceback" in failed["message"] and "RuntimeError: a bug" in failed["message"]
    assert not caplog.records
