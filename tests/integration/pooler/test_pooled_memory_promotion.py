"""Memory promotion through PgBouncer in transaction mode: suggest and auto (the scope's
transaction-scoped advisory lock, taken in the transaction that stores the facts), as
tests/integration/api/test_memory_promotion.py has them (conftest: behind the pooler)."""

from __future__ import annotations

from tests.integration.api.test_memory_promotion import (
    config_path,
    mode,
    test_auto_stores_the_facts_in_the_scope,
    test_suggest_persists_the_sanitised_facts_of_the_folded_span,
)

__all__ = [
    "config_path",
    "mode",
    "test_auto_stores_the_facts_in_the_scope",
    "test_suggest_persists_the_sanitised_facts_of_the_folded_span",
]
