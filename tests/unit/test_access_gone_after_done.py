"""The access line's ``client_gone`` (``proxy.middleware.AccessLog``) is for a client that
left before its answer was whole. A chat stream's answer is whole at ``[DONE]``: the proxy
stores the reply before it sends the response's closing (empty) body, and a client that
closes the connection as soon as it reads ``[DONE]`` (the stream's end, for it) has its
disconnect arrive first; Starlette then cancels the response, so no closing body is sent."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from proxy.middleware import AccessLog

SCOPE: dict[str, Any] = {
    "type": "http",
    "method": "POST",
    "path": "/v1/chat/completions",
    "raw_path": b"/v1/chat/completions",
    "query_string": b"",
    "headers": [],
}


def _stream(*chunks: bytes) -> Any:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        assert (await receive())["type"] == "http.disconnect"  # the client closed: cancelled

    return app


async def _line(app: Any, caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    with caplog.at_level(logging.INFO, logger="cascade.access"):
        await AccessLog(app)(dict(SCOPE), receive, send)
    (record,) = [r for r in caplog.records if r.name == "cascade.access"]
    return record.fields  # type: ignore[attr-defined, no-any-return]


async def test_a_client_closing_at_done_read_the_whole_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _stream(b'data: {"choices": []}\n\n', b"data: [DONE]\n\n")
    assert "client_gone" not in await _line(app, caplog)


async def test_a_client_closing_before_done_left_early(caplog: pytest.LogCaptureFixture) -> None:
    app = _stream(b'data: {"choices": []}\n\n')
    assert (await _line(app, caplog))["client_gone"] is True


async def test_a_delta_whose_text_is_done_is_no_end(caplog: pytest.LogCaptureFixture) -> None:
    app = _stream(b'data: {"choices": [{"index": 0, "delta": {"content": "[DONE]"}}]}\n\n')
    assert (await _line(app, caplog))["client_gone"] is True


async def test_a_providers_done_as_it_came_is_the_end(caplog: pytest.LogCaptureFixture) -> None:
    app = _stream(b'data: {"choices": []}\r\n\r\n', b"data:[DONE]\r\n\r\n")
    assert "client_gone" not in await _line(app, caplog)
