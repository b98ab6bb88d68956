"""What the tests hold the proxy to of DESIGN.md, the contract, written out here.

DESIGN.md is no file of the checkout: it sits beside it, in ``../shared``, which a clean
clone (CI's, ``.ci/run``) does not have. A test that read it there alone would skip in CI
and check nothing. So the facts the proxy must match are held here and checked against the
code everywhere, and :func:`design_text` lets a second test check them against DESIGN
itself where it is beside the checkout: a fact held wrong fails there, and the code is
judged by the fact in every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DESIGN = Path(__file__).resolve().parents[2].parent / "shared" / "DESIGN.md"

EVENTS = frozenset(
    {
        "config.rejected",
        "config.reloaded",
        "context.compaction.completed",
        "context.compaction.failed",
        "context.compaction.started",
        "context.evicted",
        "context.handoff_suggested",
        "context.retrieval",
        "context.trimmed",
        "context.truncated",
        "context.usage",
        "memory.suggestion",
        "session.message.appended",
        "session.message.delta.appended",
    }
)
"""The events DESIGN §6 names."""

TRANSIENT_EVENTS = frozenset(
    {"context.evicted", "context.handoff_suggested", "session.message.delta.appended"}
)
"""Those of them DESIGN §6 calls transient (never persisted)."""

ENDPOINTS = frozenset(
    {
        ("DELETE", "/v1/memory"),
        ("DELETE", "/v1/sessions/{id}"),
        ("GET", "/healthz"),
        ("GET", "/metrics"),
        ("GET", "/readyz"),
        ("GET", "/v1/memory"),
        ("GET", "/v1/models"),
        ("GET", "/v1/sessions"),
        ("GET", "/v1/sessions/{id}"),
        ("GET", "/v1/sessions/{id}/events"),
        ("GET", "/v1/sessions/{id}/messages"),
        ("GET", "/v1/sessions/{id}/tool-outputs/{tool_call_id}"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/memory"),
        ("POST", "/v1/memory/suggestions/{id}/accept"),
        ("POST", "/v1/memory/suggestions/{id}/reject"),
        ("POST", "/v1/sessions/{id}/branch"),
        ("POST", "/v1/sessions/{id}/compact"),
        ("POST", "/v1/sessions/{id}/reset"),
    }
)
"""Each ``METHOD /path`` DESIGN names, every id parameter but a tool call's spelt ``{id}``."""

CONTEXT_EXAMPLE = {
    "toolOutput": {"maxChars": 24000, "persistRaw": True, "rawCapBytes": 8388608},
    "redaction": {"enabled": True, "patterns": []},
    "eviction": {
        "enabled": True,
        "atFraction": 0.5,
        "keepRecentRounds": 3,
        "clearAtLeast": 2000,
        "minResultTokens": 200,
        "excludeTools": [],
    },
    "summarize": {
        "enabled": True,
        "background": True,
        "softFraction": 0.7,
        "hardFraction": 0.9,
        "keepRecent": 8,
        "reflectTokens": 4000,
    },
    "recitation": {"enabled": False},
    "retrieval": {"enabled": False, "minScore": 0.35, "maxResults": 4, "snippetChars": 1200},
    "memoryPromotion": {"mode": "off"},
    "handoff": {"enabled": False, "atFraction": 0.9},
}
"""The ``context`` block of DESIGN's example config."""


def design_text() -> str:
    """DESIGN.md's text; the test skips where it is not beside the checkout (a clean clone),
    the facts above being checked against the code there all the same."""
    if not DESIGN.exists():
        pytest.skip(f"no {DESIGN} beside the checkout: its facts held in tests/unit/design.py")
    return DESIGN.read_text(encoding="utf-8")
