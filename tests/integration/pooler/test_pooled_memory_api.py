"""The memory API through PgBouncer in transaction mode: facts added, listed and deleted,
a suggestion accepted, as tests/integration/api/test_memory_api.py has them (conftest:
behind the pooler)."""

from __future__ import annotations

from tests.integration.api.test_memory_api import (
    config_path,
    test_a_duplicate_is_refused,
    test_a_suggestion_is_listed_until_it_is_accepted,
    test_add_list_and_delete_a_fact,
)

__all__ = [
    "config_path",
    "test_a_duplicate_is_refused",
    "test_a_suggestion_is_listed_until_it_is_accepted",
    "test_add_list_and_delete_a_fact",
]
