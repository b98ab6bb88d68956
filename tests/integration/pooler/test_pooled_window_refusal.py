"""The provider's refusal for length through PgBouncer in transaction mode: the calibration
it teaches goes into the statement that frees the lease (``RELEASE_LEASE`` with its typed
optional parameter), on a session's very first request and on a later round's refusal
(tests/integration/api's own tests, run here behind the pooler: conftest)."""

from __future__ import annotations

from tests.integration.api.test_provider_window_refusal import (
    test_an_unrelated_refusal_teaches_nothing,
    test_the_same_history_after_the_providers_refusal_is_trimmed_and_answered,
)
from tests.integration.api.test_provider_window_refusal_rounds import (
    test_a_later_rounds_refusal_for_length_raises_the_calibration,
)
from tests.integration.api.test_read_tool_output_answers import config_path

__all__ = [
    "config_path",  # the rounds test's config (maxChars 2000, raw outputs kept)
    "test_a_later_rounds_refusal_for_length_raises_the_calibration",
    "test_an_unrelated_refusal_teaches_nothing",  # no calibration: a NULL parameter
    "test_the_same_history_after_the_providers_refusal_is_trimmed_and_answered",
]
