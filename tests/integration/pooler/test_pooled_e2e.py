"""The end-to-end property replay across two replicas, both behind PgBouncer in transaction
mode with ``DATABASE_LISTEN_URL`` direct (tests/integration/test_e2e_properties.py's slice).
``CASCADE_TEST_POOLER=transaction scripts/e2e_props.sh`` replays every transcript whole
this way (with ``CASCADE_TEST_E2E_REPLICAS=2`` across two replicas)."""

from __future__ import annotations

from tests.integration.test_e2e_properties import (
    started,
    test_a_replay_across_two_replicas_keeps_every_property,
)

__all__ = ["started", "test_a_replay_across_two_replicas_keeps_every_property"]
