"""The SSE frames of a streamed chat response, as the streaming tests read them, and the
streamed chat that makes them (``stream_chat``).

The frame readers keep the leading underscore the tests call them by.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

DONE = b"data: [DONE]"


def _events(data: bytes) -> list[bytes]:
    """SSE events (without their blank line) in order, comments included."""
    return [e for e in data.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]


def _data_frames(data: bytes) -> list[bytes]:
    return [e for e in _events(data) if e.startswith(b"data:")]


def _payload(frame: bytes) -> Any:
    return json.loads(frame[len(b"data:") :])


def stream_chat(http: httpx.Client, sid: str, messages: list[Any]) -> httpx.Response:
    """A streamed chat completion of ``messages`` on session ``sid``, read whole."""
    body = {"model": "gpt-fake", "messages": messages, "stream": True}
    return http.post("/v1/chat/completions", headers={"x-session-id": sid}, json=body)
