"""Stubs of the store's reads of a tool output (``store.raw_outputs``) for the services'
unit tests: the version, the read, and the first read that asks both in one statement."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from proxy.store import raw_outputs


def stub_reads(
    monkeypatch: pytest.MonkeyPatch,
    fetch: Callable[..., Awaitable[dict[str, Any] | None]],
    version: Callable[..., Awaitable[str]],
) -> None:
    """``fetch`` for ``fetchrow_raw_output``, ``version`` for ``fetchval_version``, and the
    two in turn for ``fetch_first``."""

    async def first(conn: Any, **where: Any) -> tuple[str, dict[str, Any] | None]:
        return await version(conn, **where), await fetch(conn, **where)

    monkeypatch.setattr(raw_outputs, "fetchrow_raw_output", fetch)
    monkeypatch.setattr(raw_outputs, "fetchval_version", version)
    monkeypatch.setattr(raw_outputs, "fetch_first", first)
