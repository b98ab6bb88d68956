"""Eviction through PgBouncer in transaction mode: an agent loop whose old tool results
become placeholders, stored in place and resent the same way on every later step
(tests/integration/api/test_eviction.py's tests)."""

from __future__ import annotations

from tests.integration.api.test_eviction import (
    config_path,
    test_eviction_persists_and_consecutive_prompts_share_their_prefix,
)

__all__ = [
    "config_path",
    "test_eviction_persists_and_consecutive_prompts_share_their_prefix",
]
