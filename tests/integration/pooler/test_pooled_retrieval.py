"""Retrieval through PgBouncer in transaction mode: the background embedder's claims and
writes, the vector search (pgvector's codec on a pooled connection) and a reload that turns
it off, as tests/integration/api/test_retrieval.py has them (conftest: behind the pooler)."""

from __future__ import annotations

from tests.integration.api.test_retrieval import (
    config_path,
    proxy,
    test_a_planted_fact_comes_back_for_a_later_question_and_only_from_its_session,
    test_turning_retrieval_off_removes_the_block_on_the_next_request,
    test_turning_retrieval_on_backfills_a_session_stored_without_it,
)

__all__ = [
    "config_path",
    "proxy",
    "test_a_planted_fact_comes_back_for_a_later_question_and_only_from_its_session",
    "test_turning_retrieval_off_removes_the_block_on_the_next_request",
    "test_turning_retrieval_on_backfills_a_session_stored_without_it",
]
