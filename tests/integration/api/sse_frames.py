"""The SSE frames of a streamed chat response, as the streaming tests read them.

The names keep the leading underscore the tests call them by.
"""

from __future__ import annotations

import json
from typing import Any

DONE = b"data: [DONE]"


def _events(data: bytes) -> list[bytes]:
    """SSE events (without their blank line) in order, comments included."""
    return [e for e in data.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]


def _data_frames(data: bytes) -> list[bytes]:
    return [e for e in _events(data) if e.startswith(b"data:")]


def _payload(frame: bytes) -> Any:
    return json.loads(frame[len(b"data:") :])
