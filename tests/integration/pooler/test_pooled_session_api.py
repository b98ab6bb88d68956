"""The session API through PgBouncer in transaction mode: a wait for another replica's
lease, ``/compact`` (the endpoint and the chat message), the event stream's replay after
``Last-Event-ID`` and its one read of the table before a burst heard live in its first
seconds, the config reload's event and the memory block two replicas agree on, as
tests/integration/api has them (conftest: behind the pooler)."""

from __future__ import annotations

from tests.integration.api.conftest import records, start_proxy
from tests.integration.api.test_compact_command import (
    test_a_chat_message_that_is_exactly_slash_compact_forces_a_compaction,
    test_the_endpoint_forces_a_compaction,
)
from tests.integration.api.test_config_events_tenants import (
    test_with_proxy_keys_a_tenants_stream_gets_no_path_nor_reason,
)
from tests.integration.api.test_events import test_last_event_id_replays_only_later_events
from tests.integration.api.test_events_unannounced_order import (
    test_a_burst_heard_live_in_the_first_seconds_costs_one_read,
)
from tests.integration.api.test_memory_replicas import (
    test_memory_is_shared_and_stable_within_a_turn_across_replicas,
)
from tests.integration.api.test_session_waits import (
    test_a_wait_for_another_replicas_lease_is_logged_and_measured,
)

__all__ = [
    "records",
    "start_proxy",
    "test_a_burst_heard_live_in_the_first_seconds_costs_one_read",
    "test_a_chat_message_that_is_exactly_slash_compact_forces_a_compaction",
    "test_a_wait_for_another_replicas_lease_is_logged_and_measured",
    "test_last_event_id_replays_only_later_events",
    "test_memory_is_shared_and_stable_within_a_turn_across_replicas",
    "test_the_endpoint_forces_a_compaction",
    "test_with_proxy_keys_a_tenants_stream_gets_no_path_nor_reason",
]
