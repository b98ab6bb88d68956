"""``bench.redaction_speed --against REV --rules`` times REV's own built-in patterns, not this
checkout's on both sides (which times the code alone, and says nothing of a rule's cost)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from bench import redaction_speed
from proxy.cascade.redaction import compile_patterns

_MARKER = "zz-only-in-that-revision"


def test_rules_of_a_revision_are_its_own_and_leave_this_checkouts_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = subprocess.run
    modules = dict(sys.modules)

    def show(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        out = real(cmd, **kwargs)
        if cmd[-1].endswith(":proxy/cascade/secret_patterns.py"):
            out.stdout += f"\nDEFAULT_PATTERNS = (*DEFAULT_PATTERNS, {_MARKER!r})\n"
        return out

    monkeypatch.setattr(subprocess, "run", show)
    theirs = [p.pattern for p in redaction_speed.revision_patterns("HEAD")]
    assert theirs[-1] == _MARKER
    assert _MARKER not in [p.pattern for p in compile_patterns(())]
    assert all(sys.modules[name] is modules[name] for name in modules if "cascade" in name)
