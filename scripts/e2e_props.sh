#!/bin/sh
# Replay whole real transcripts through the real proxy (embedded PostgreSQL, the fake
# upstream) with every stage on, checking the properties of tests/integration/
# test_e2e_properties.py at every step; the suite runs only a slice of each.
#   scripts/e2e_props.sh                   # 16k and 32k windows, both passes
#   LIMITS=9000,16000 scripts/e2e_props.sh -k spotter
#   CASCADE_TEST_E2E_RESTART=30 scripts/e2e_props.sh   # a new proxy takes over after step 30
#   CASCADE_TEST_E2E_REUSE_IDS=1 scripts/e2e_props.sh  # call ids renumbered call_0.. each step
#   CASCADE_TEST_E2E_REPLICAS=2 scripts/e2e_props.sh  # two replicas, steps sent in turn
#   CASCADE_TEST_E2E_REPLICAS=2 CASCADE_TEST_E2E_PICK=random:7 scripts/e2e_props.sh  # seeded
#   CASCADE_TEST_POOLER=transaction scripts/e2e_props.sh  # behind PgBouncer (transaction mode)
#   CASCADE_TEST_E2E_DERIVED=1 scripts/e2e_props.sh   # no session id: the derived one, kept
# Each replay prints its tally (steps, handles read back, reads, cuts, evictions ...).
set -eu
cd "$(dirname "$0")/.."
CASCADE_TEST_E2E_STEPS=0 CASCADE_TEST_E2E_LIMITS="${LIMITS:-16000,32000}" \
    exec .venv/bin/pytest -q -s -p no:logging \
    tests/integration/test_e2e_properties.py "$@"
