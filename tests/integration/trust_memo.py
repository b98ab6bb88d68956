"""One default-trust ``SSLContext`` per CA bundle for an integration test's process.

Every ``httpx.Client`` and ``openai.OpenAI`` a test makes, every ``httpx.get``, and each
proxy start (its ``SSL_CERT_FILE`` check and its provider transport's warm-up) build an
``SSLContext`` (httpx's, or httpx2's for the openai SDK's clients) that loads the trusted CA
bundle, plain-http loopback ones too: tens of ms of CPU each, several per test, and most of a
test's own time on a loaded machine. While :func:`install` is in force, ``create_ssl_context``
called for the default trust (``verify=True``, no ``cert``) hands back the context made
before for the same bundle: the same ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, the file unchanged
(its inode, size and mtime), so a test that points them elsewhere or rewrites the bundle gets
one loaded from it. A bundle that does not load raises, as without. Contexts made for a
provider's ``caFile`` or ``verifyTls: false``, or passed by a test, are not touched.
"""

from __future__ import annotations

import functools
import importlib
import os
import ssl
from collections.abc import Callable
from typing import Any

import pytest

_made: dict[tuple[object, ...], ssl.SSLContext] = {}
_REAL: dict[str, Callable[..., ssl.SSLContext]] = {}
# httpx, and httpx2 (the fork the openai SDK builds its clients on); each module that calls
# its ``create_ssl_context`` by name.
_FAMILIES = {
    "httpx": ("httpx", "httpx._config", "httpx._transports.default"),
    "httpx2": ("httpx2", "httpx2._config", "httpx2._transports.default"),
}


def _stamp(path: str | None) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)


def _memo(
    family: str,
    real: Callable[..., ssl.SSLContext],
    verify: Any = True,
    cert: Any = None,
    trust_env: bool = True,
) -> ssl.SSLContext:
    if verify is not True or cert is not None:
        return real(verify=verify, cert=cert, trust_env=trust_env)
    file = os.environ.get("SSL_CERT_FILE") if trust_env else None
    folder = os.environ.get("SSL_CERT_DIR") if trust_env else None
    key = (family, trust_env, file, _stamp(file), folder)
    if key not in _made:
        _made[key] = real(verify=verify, cert=cert, trust_env=trust_env)
    return _made[key]


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memo in place of ``create_ssl_context`` (each name it is called by, in each
    family installed) until ``monkeypatch`` is undone."""
    for family, names in _FAMILIES.items():
        try:
            modules = [importlib.import_module(name) for name in names]
        except ImportError:
            continue
        real = _REAL.setdefault(family, modules[1].create_ssl_context)
        memo = functools.partial(_memo, family, real)
        for module in modules:
            monkeypatch.setattr(module, "create_ssl_context", memo)
