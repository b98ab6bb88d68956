"""The store uses asyncpg through its public API only (the project's rule for well-kept
libraries): its cancel state (``_protocol``, ``_is_cancelling``, ``_wait_for_cancellation``)
and a pooled connection's ``_con`` are asyncpg's own, free to change in any release, where a
cancelled statement's grace (``db.CANCEL_GRACE``) rests on ``Pool.release(timeout=)``,
``Connection.terminate()`` and Cascade's own mark (``GuardedConnection.cancel_unsettled``)."""

from __future__ import annotations

import ast
from pathlib import Path

import proxy

PRIVATE = {
    *("_protocol", "_is_cancelling", "_wait_for_cancellation", "_con", "_cancel"),
    "_config",  # a connection's settings: its command_timeout is GuardedConnection's own
}


def _private_names(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            found.add(node.attr)
        if isinstance(node, ast.Constant) and node.value in PRIVATE:
            found.add(str(node.value))  # getattr(conn, "_protocol")
    return found


def test_no_module_that_uses_asyncpg_reads_its_cancel_state() -> None:
    root = Path(proxy.__file__).parent
    used = {
        str(path.relative_to(root)): names
        for path in sorted(root.rglob("*.py"))
        if "asyncpg" in path.read_text(encoding="utf-8") and (names := _private_names(path))
    }
    assert used == {}
