"""The chat flow through PgBouncer in transaction mode (issue 24): a new session, an
extended history, a tool loop whose large result is truncated and paged back with
``read_tool_output``, and eviction. The tests are tests/integration/api's own, run here
behind the pooler (conftest); passing there and here means the same behaviour both ways."""

from __future__ import annotations

from tests.integration.api.test_events import (
    test_frames_carry_event_id_and_json_data,
    test_streamed_request_publishes_usage,
)
from tests.integration.api.test_smoke import test_nonstream_roundtrip, test_stream_roundtrip
from tests.integration.api.test_truncation import (
    boot,
    test_large_result_keeps_head_and_tail_with_a_paging_marker,
)

__all__ = [
    "boot",
    "test_frames_carry_event_id_and_json_data",  # a new session, then an extended history
    "test_large_result_keeps_head_and_tail_with_a_paging_marker",
    "test_nonstream_roundtrip",
    "test_stream_roundtrip",
    "test_streamed_request_publishes_usage",
]
