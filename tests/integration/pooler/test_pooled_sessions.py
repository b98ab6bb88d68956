"""Branch, reset and delete through PgBouncer in transaction mode, each waiting for the
request in flight on its session, as tests/integration/api/test_sessions.py has them
(its config: a small ``maxChars``, so a tool result is cut and its raw output stored)."""

from __future__ import annotations

from tests.integration.api.sessions_helpers import config_path
from tests.integration.api.test_sessions import (
    test_branch_copies_messages_and_tool_outputs,
    test_delete_cascades_to_everything_the_session_owns,
    test_reset_and_delete_wait_for_the_request_in_flight,
)

__all__ = [
    "config_path",
    "test_branch_copies_messages_and_tool_outputs",
    "test_delete_cascades_to_everything_the_session_owns",
    "test_reset_and_delete_wait_for_the_request_in_flight",
]
