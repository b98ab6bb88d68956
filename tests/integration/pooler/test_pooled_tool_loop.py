"""``read_tool_output`` answered inside the proxy's tool loop, through PgBouncer in
transaction mode: the internal round reads the spilled output back on a pooled connection
between two provider calls (tests/integration/api/test_read_tool_output_answers.py's and
test_read_tool_output_rounds.py's tests)."""

from __future__ import annotations

from tests.integration.api.test_read_tool_output_answers import (
    config_path,
    test_internal_call_is_answered_from_the_store_and_hidden_from_the_client,
)
from tests.integration.api.test_read_tool_output_rounds import (
    test_a_model_that_keeps_reading_is_cut_off_without_leaking_the_call,
)

__all__ = [
    "config_path",
    "test_a_model_that_keeps_reading_is_cut_off_without_leaking_the_call",
    "test_internal_call_is_answered_from_the_store_and_hidden_from_the_client",
]
