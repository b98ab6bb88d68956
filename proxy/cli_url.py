"""What the ``sessions`` and ``memory`` commands read from ``--url``/``CASCADE_URL``: the
proxy's origin, whether the URL carries credentials or a query, a port no server listens on,
and whether it names this machine; and an id escaped as one segment of an API path.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from proxy.listen import is_loopback

__all__ = [
    "check_port",
    "has_credentials",
    "has_query",
    "on_loopback",
    "origin_of",
    "path_segment",
]


def origin_of(url: str) -> str:
    """The proxy's origin from ``--url``/``CASCADE_URL``, without a trailing slash. The
    client base URL the start-up banner prints (``http://host:port/v1``) is taken as its
    origin, since the routes here start with ``/v1``; any other path is kept, for a proxy
    mounted under a prefix."""
    try:
        parts = urlsplit(url)
    except ValueError:  # "http://[::1": call_api reports it as not a URL
        return url.rstrip("/")
    if parts.path in ("/v1", "/v1/"):
        return urlunsplit(parts._replace(path=""))
    return url.rstrip("/")


def path_segment(text: str) -> str:
    """``text`` as one segment of an API path, escaped whole, dots too: a client resolves
    ``.`` or ``..`` as a path step (``sessions show ..`` asked ``GET /v1``); escaped, they
    reach the proxy, which says they name nothing."""
    return quote(text, safe="").replace(".", "%2E")


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries a user or a password, which httpx sends as Basic auth in the
    Authorization header (for a reverse proxy in front of the proxy), as it decides."""
    try:
        parts = urlsplit(url)
        return bool(parts.username or parts.password)
    except ValueError:  # "http://[::1": call_api reports it as not a URL
        return False


def has_query(url: str) -> bool:
    """Whether ``url``, one httpx takes, has a query or a fragment (``?`` or ``#``, empty
    too): the API's path is appended to the URL, and would land in it. A URL httpx refuses
    (a ``#`` in a password) is left to ``call_api``, which says it is none."""
    try:
        httpx.URL(url)
    except httpx.InvalidURL:
        return False
    return "?" in url or "#" in url


def check_port(url: str) -> None:
    """Raise httpx's ``InvalidURL`` for a port out of 1-65535, which httpx takes and calls
    another port for (``:99999`` its remainder), or port 0, which no server listens on: a
    usage error, not a proxy that is not there."""
    try:
        port = urlsplit(url).port  # raises for one out of range
    except ValueError as exc:
        raise httpx.InvalidURL(str(exc)) from None
    if port == 0:
        raise httpx.InvalidURL("Port 0 is no TCP port to call, 1-65535")


def on_loopback(url: str) -> bool:
    """Whether ``url`` names this machine: called direct, as Go clients do, not through the
    ``HTTP_PROXY``/``ALL_PROXY`` egress proxy the environment may set for provider calls,
    which would see the proxy key or refuse a loopback address."""
    try:
        return is_loopback(urlsplit(url).hostname or "")
    except ValueError:  # "http://[::1": httpx says it is not a URL
        return False
