"""The answer to a failure of the proxy's own database: a 503 the SDKs retry, with the
``Retry-After`` they wait. The app's error handlers send it as a response, and a stream whose
``200`` went out already sends it as its error frame (``services/prep_wait.py``)."""

from __future__ import annotations

from typing import Any

from proxy.errors import error_body
from proxy.store.db import DatabaseTimeout, DatabaseUnavailable, PoolExhausted

__all__ = ["database_answer"]


def database_answer(exc: BaseException) -> tuple[int, dict[str, Any], str] | None:
    """The status, body and Retry-After answering ``exc``; None when it is no such failure.
    An unavailable or slow database is said in the proxy's words (its message names the
    server); a pool with no connection free says how long it waited."""
    if isinstance(exc, DatabaseTimeout):
        text = "the proxy's database did not answer in time; retry shortly"
        return 503, error_body(text, type="server_error", code="database_unavailable"), "5"
    if isinstance(exc, DatabaseUnavailable):
        text = "the proxy's database is unavailable; retry shortly"
        return 503, error_body(text, type="server_error", code="database_unavailable"), "5"
    if isinstance(exc, PoolExhausted):
        return 503, error_body(str(exc), type="server_error", code="server_busy"), "1"
    return None
