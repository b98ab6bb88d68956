"""A request whose reserved output alone fills the model's window (``max_tokens`` or
``max_completion_tokens`` at or past its ``contextLimit``) can fit no prompt at all: its 400
``context_length_exceeded`` says to lower that, not to shorten a message or start a new
session, which cannot help; a prompt too large for the room left still names its largest
message."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

_MODELS = {"default": {"contextLimit": 3000}}


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_an_output_reserved_past_the_window_is_refused_naming_it(
    field: str, start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url, models=_MODELS))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: 5000}
    resp = httpx.post(f"{proxy.url}/chat/completions", json=body, headers={"x-session-id": "o1"})
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "output reserved (5000) alone fills the window (limit 3000)" in error["message"]
    assert "lower max_tokens" in error["message"]
    assert "shorten it" not in error["message"]
    assert not fake_upstream.requests  # a request that must fail is never sent


def test_a_prompt_past_the_room_left_still_names_its_largest_message(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url, models=_MODELS))
    words = " ".join(f"w{i}" for i in range(4000))
    body = {"model": "m", "messages": [{"role": "user", "content": words}], "max_tokens": 100}
    resp = httpx.post(f"{proxy.url}/chat/completions", json=body, headers={"x-session-id": "o2"})
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    assert "The largest message (the last message, role user)" in message
    assert "alone fills the window" not in message
