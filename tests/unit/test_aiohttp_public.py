"""The aiohttp transport uses aiohttp and httpx-aiohttp through their public API only (the
project's rule for well-kept libraries): a stream reader's ``_protocol`` or httpx-aiohttp's
``_aiohttp_response`` are theirs, free to change in any release; the transport reaches the
response through aiohttp's request trace (``TraceConfig.on_request_end``) and the
connection through ``ClientResponse.connection``."""

from __future__ import annotations

import ast
from pathlib import Path

import proxy

OWN = {"self", "cls"}


def _private_reads(path: Path) -> set[str]:
    """Private names read off another object than the module's own ones (``self``): an
    attribute (``x._name``) or a name handed to ``getattr``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and not (own and node.value.id in OWN)
        ):
            found.add(node.attr)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "hasattr"}
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and _private(str(node.args[1].value))
        ):
            found.add(str(node.args[1].value))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _imports_aiohttp(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] in {"aiohttp", "httpx_aiohttp"} for name in names):
            return True
    return False


def test_no_module_that_uses_aiohttp_reads_its_private_names() -> None:
    root = Path(proxy.__file__).parent
    modules = [path for path in sorted(root.rglob("*.py")) if _imports_aiohttp(path)]
    assert root / "aiohttp_stream.py" in modules
    used = {str(p.relative_to(root)): names for p in modules if (names := _private_reads(p))}
    assert used == {}
