"""Serialisation, compaction and cross-replica events through PgBouncer in transaction mode.

Two replicas, both behind the pooler: two concurrent requests on one session are
serialised (the second reaches the provider only after the first is stored), a compaction
runs once (a job that claims the session only after the other replica's compaction stored
its summary folds nothing, and a request over the hard threshold that waited for that claim
measures again on the summary), an event made on one replica reaches a stream open on the
other, whose bus LISTENs on ``DATABASE_LISTEN_URL``, and so does the news that a session
one replica waits for was freed by the other, as do a streamed reply's delta events
(tests/integration/api/test_replicas.py, test_compaction_summaries.py's,
test_lease_handoff.py's and test_deltas.py's tests)."""

from __future__ import annotations

from tests.integration.api.test_compaction_summaries import (
    test_after_a_compaction_the_prompt_is_summary_plus_messages_since_the_boundary,
)
from tests.integration.api.test_deltas import (
    quick_keeper,
    test_another_replicas_watcher_gets_the_deltas,
)
from tests.integration.api.test_lease_handoff import (
    held,
    pauses,
    test_a_waiter_on_another_replica_takes_the_session_as_soon_as_it_is_freed,
)
from tests.integration.api.test_replicas import (
    test_a_background_compaction_claimed_after_another_replicas_summary_folds_nothing,
    test_a_compaction_runs_once_for_both_replicas_and_is_counted_once,
    test_a_hard_request_that_waited_out_another_replicas_compaction_measures_again,
    test_a_sessions_requests_are_serialised_across_replicas,
    test_an_event_made_on_one_replica_reaches_a_subscriber_on_the_other,
)

__all__ = [
    "quick_keeper",
    "test_another_replicas_watcher_gets_the_deltas",
    "held",
    "pauses",
    "test_a_waiter_on_another_replica_takes_the_session_as_soon_as_it_is_freed",
    "test_a_background_compaction_claimed_after_another_replicas_summary_folds_nothing",
    "test_a_compaction_runs_once_for_both_replicas_and_is_counted_once",
    "test_a_hard_request_that_waited_out_another_replicas_compaction_measures_again",
    "test_a_sessions_requests_are_serialised_across_replicas",
    "test_after_a_compaction_the_prompt_is_summary_plus_messages_since_the_boundary",
    "test_an_event_made_on_one_replica_reaches_a_subscriber_on_the_other",
]
