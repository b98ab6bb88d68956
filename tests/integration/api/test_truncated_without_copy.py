"""Regression: ``GET /v1/sessions/{id}/messages`` said ``truncated: false`` of a tool result
cut with no copy kept (``persistRaw`` off, or a redacted result, whose secret is never
stored), so a dashboard took the cut text the model was sent for the whole output. The flag
says whether what the model was sent is less than the whole output, copy or none; a result
only redacted, or one whose own text looks like a marker, is not cut."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.read_tool_output_helpers import chat, context, history
from tests.integration.transcripts import api, blob

SECRET = "ACME-12345678"  # the configured pattern's
LOOKALIKE = "ran\n[... truncated 12 chars; re-run the tool if you need the rest ...]\nok"


@pytest.fixture
def config_path(tmp_path: Path, fake_upstream: FakeUpstream) -> Path:
    ctx = context(persist_raw=False) | {"redaction": {"patterns": ["ACME-[0-9]{8}"]}}
    return write_config(tmp_path / "agents.json", fake_upstream.url, context=ctx)


def _marks(proxy: ProxyServer, **params: Any) -> list[tuple[str, bool, bool, bool]]:
    """(tool call id, superseded, truncated, redacted) of each tool result row."""
    with api(proxy) as http:
        rows = http.get("/v1/sessions/nocopy/messages", params=params).json()["data"]
    return [
        (r["tool_call_id"], r["superseded"], r["truncated"], r["redacted"])
        for r in rows
        if r["role"] == "tool"
    ]


def test_a_result_cut_with_no_copy_is_marked_truncated(proxy: ProxyServer) -> None:
    outputs = {
        "call_cut": blob(9000, "cut"),
        "call_secret_cut": blob(9000, "hid") + f" {SECRET} ",
        "call_secret": f"short, with {SECRET} in it",
        "call_lookalike": LOOKALIKE,
    }
    messages: list[dict[str, Any]] = []
    for cid, output in outputs.items():
        messages += [*history(cid, output, tag=cid), {"role": "assistant", "content": "ok"}]
    chat(proxy, "nocopy", messages[:-1])
    expected = [
        ("call_cut", False, True, False),
        ("call_secret_cut", False, True, True),
        ("call_secret", False, False, True),
        ("call_lookalike", False, False, False),
    ]
    assert _marks(proxy) == expected
    with api(proxy) as http:  # no copy pages back, as before
        assert http.get("/v1/sessions/nocopy/tool-outputs/call_cut").status_code == 404
    messages[0] = {"role": "user", "content": "look again"}  # supersedes every row
    chat(proxy, "nocopy", messages[:-1])
    rows = _marks(proxy, include_superseded="true")
    assert [r for r in rows if r[1]] == [(c, True, t, r) for c, _, t, r in expected]
    assert [r for r in rows if not r[1]] == expected
