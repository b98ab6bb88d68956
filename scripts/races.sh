#!/bin/sh
# Race the session API's operations against chat, compaction and each other, black-box,
# on two replicas of the real proxy (tests/integration/api/test_session_races*.py, whose
# module docstrings say what each case checks); the suite runs only a slice of it.
#   scripts/races.sh                      # the whole matrix
#   scripts/races.sh -k mid_compaction    # one family
#   scripts/races.sh -x -k reset          # stop at the first failure
set -eu
cd "$(dirname "$0")/.."
CASCADE_TEST_RACES=all exec .venv/bin/pytest -q -p no:randomly -n 2 \
    tests/integration/api/test_session_races.py \
    tests/integration/api/test_session_races_compaction.py "$@"
