"""Transport failures of a provider call, as the 502 and 504 a client and an operator read.

A failure to reach a provider is a 502 (``UpstreamUnavailable``), an answer that broke off
or is unusable a 502 of its own code (``UpstreamBadResponse``), and a wait that ran out a
504 (``UpstreamTimeout``); each message names the provider (its name in config and its host,
never credentials) and the egress proxy the call went through, if any; says why in a few
words taken from the exception chain (a refused connection, a name that does not resolve, a
certificate the provider's ``caFile`` does not sign); and says what to check. The
transport's exception stays chained for the log. A whole answer that is no chat completion
is a 502 too (``completion``), and a provider's error in a stream gets one log line
(``log_stream_error``), as its own error answers do (``log_relayed``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from proxy import chunk_faults, stream_whole
from proxy.config import ProviderConfig
from proxy.credentials import query_key_sent
from proxy.errors import UpstreamBadResponse, UpstreamTimeout, UpstreamUnavailable
from proxy.observe_notes import note_bad_answer

if TYPE_CHECKING:
    from proxy.answers import Answer

__all__ = [
    "POOL_WAIT_SECONDS",
    "completion",
    "log_relayed",
    "log_stream_error",
    "mapped_errors",
    "provider_name",
]

log = logging.getLogger("cascade")

POOL_WAIT_SECONDS = 30.0  # how long a request waits for one of a provider's capped connections


@contextlib.contextmanager
def mapped_errors(
    provider: ProviderConfig,
    proxy_for: Callable[[str], str | None] | None = None,
    *,
    answered: int | None = None,
) -> Iterator[None]:
    """Turn transport failures into 504 (timed out) or 502 (unreachable), naming the
    provider and the cause, with the original exception chained. ``proxy_for`` names the
    egress proxy a provider's base URL goes through (asked only on a failure): a connection
    that failed there is the proxy's, and the message says so. ``answered``, the status of
    an answer whose body is being read, makes a failure one of that body, which broke off:
    the provider was reached, and its baseUrl is not what to check."""
    try:
        yield
    except (httpx.RequestError, httpx.InvalidURL, OSError, ssl.SSLError) as exc:
        if answered is not None and not (
            isinstance(exc, httpx.TimeoutException) and _timed_out(exc)
        ):
            where, name, why = provider_name(provider), type(exc).__name__, _cause(exc)
            what = "broke off"
            if isinstance(exc, httpx.DecodingError):  # it came whole: its encoding failed
                what, why = "did not decode", str(exc).split("://")[0][:200]
            elif why == _FAILED:  # no reset, no OS error: the provider closed before the end
                why = "the connection closed before the body's end"
            raise UpstreamBadResponse(
                f"{where} answered {answered}, then its body {what} ({name}: {why}); "
                "retry the request"
            ) from exc
        via = _proxy(proxy_for, provider.base_url)
        # httpx-aiohttp wraps every connection failure in a ConnectTimeout: the log's causes
        # start at what happened (a refusal), not at a timeout there was none of
        misnamed = isinstance(exc, httpx.TimeoutException) and not _timed_out(exc)
        raise _mapped(provider, exc, via) from (exc.__cause__ if misnamed else exc)


def _proxy(proxy_for: Callable[[str], str | None] | None, base_url: str) -> str | None:
    """The egress proxy's ``scheme://host:port`` (never its user:password), or None."""
    if proxy_for is None:
        return None
    try:
        url = proxy_for(base_url) or ""
        return _origin(url) if urlsplit(url).hostname else None
    except (ValueError, httpx.InvalidURL):
        return None


def _mapped(
    provider: ProviderConfig, exc: Exception, via: str | None = None
) -> UpstreamTimeout | UpstreamUnavailable:
    where = provider_name(provider)
    if via is not None:
        where = f"{where} through the egress proxy {via}"
    name = type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        if _timed_out(exc):
            return _timeout(where, exc)
        name = type(exc.__cause__).__name__
    kind = _kind(exc)
    if via is not None and kind == "other":
        kind = "proxy"  # refused, unresolved, closed: the proxy or what it was asked to reach
    hint = _HINTS.get(kind, "check the provider's baseUrl and that it is running")
    cause = _cause(exc)
    if kind == "cafile":
        cause = f"its caFile {provider.ca_file} cannot be loaded ({cause})"
    return UpstreamUnavailable(f"could not reach {where}: {cause} ({name}); {hint}")


def _timeout(where: str, exc: httpx.TimeoutException) -> UpstreamTimeout:
    if isinstance(exc, httpx.PoolTimeout):
        return UpstreamTimeout(
            f"every connection to {where} stayed busy for {POOL_WAIT_SECONDS:g} s;"
            " retry, or raise CASCADE_PROVIDER_MAX_CONNECTIONS"
        )
    if isinstance(exc, httpx.ConnectTimeout):
        return UpstreamTimeout(
            f"{where} did not accept a connection in time (ConnectTimeout); retry, "
            "or raise the provider's connectTimeoutSeconds in config"
        )
    return UpstreamTimeout(
        f"{where} did not answer in time ({type(exc).__name__}); retry, or raise "
        "the provider's timeoutSeconds in config"
    )


def _timed_out(exc: httpx.TimeoutException) -> bool:
    """False for the connection failures httpx-aiohttp reports as ``ConnectTimeout`` (it
    maps every aiohttp connection error so: a refused connection, a provider that closes):
    an aiohttp cause is a timeout only when a ``TimeoutError`` is among its causes."""
    cause = exc.__cause__
    if cause is None or not type(cause).__module__.startswith("aiohttp"):
        return True
    return any(isinstance(e, TimeoutError) for e in _chain(cause))


_HINTS = {
    "tls": "set the provider's caFile to the CA that signed its certificate (or verifyTls "
    "false), or SSL_CERT_FILE for the whole process",
    "cafile": "check the provider's caFile",
    "url": "fix the provider's baseUrl in config",
    "proxy": "check HTTPS_PROXY / HTTP_PROXY / ALL_PROXY / NO_PROXY, and that the proxy is"
    " running and can reach the provider",
}


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it, depth first, through exception groups too."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        if isinstance(e, BaseExceptionGroup):
            stack.extend(reversed(e.exceptions))
        for nxt in (e.__context__, e.__cause__):
            if nxt is not None:
                stack.append(nxt)


def _kind(exc: BaseException) -> str:
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return "url"
    if not isinstance(exc, httpx.HTTPError):  # raised before sending: the caFile
        return "cafile"
    if isinstance(exc, httpx.ProxyError):
        return "proxy"
    if any(isinstance(e, ssl.SSLError) for e in _chain(exc)):
        return "tls"
    return "other"


def _cause(exc: BaseException) -> str:
    """Why, in a few words, from the most telling cause in the chain: never a URL, so never
    a secret. (aiohttp's wrappers are OSErrors too, so the specific kinds are looked for
    first, through the whole chain.)"""
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return "the baseUrl is not a usable http(s) URL"
    chain = list(_chain(exc))
    for e in chain:
        if isinstance(e, ssl.SSLCertVerificationError) and getattr(e, "verify_message", None):
            return f"certificate verify failed: {e.verify_message}"
    for e in chain:
        if isinstance(e, socket.gaierror):
            return f"name resolution failed ({e.strerror})"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
    for e in chain:
        if isinstance(e, ssl.SSLError) and (e.reason or e.strerror):
            return f"TLS failed: {e.reason or e.strerror}"
    for e in chain:
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
    if isinstance(exc, httpx.ProxyError | httpx.RemoteProtocolError):
        return str(exc).split("://")[0][:200]  # the proxy's or provider's words, not a URL
    return _FAILED


_FAILED = "the connection failed"


def provider_name(provider: ProviderConfig) -> str:
    """``the provider 'openai' at https://host:port``: never its user:password, and never an
    error of its own for a URL that does not parse (a bad port, a bracket)."""
    label = f"the provider {provider.name!r}" if provider.name else "the provider"
    try:
        return f"{label} at {_origin(provider.base_url)}"
    except ValueError:
        return f"{label} (its baseUrl does not parse)"


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, without its user:password or path; ValueError
    when it does not parse (a bad port, a bracket)."""
    u = urlsplit(url)
    port = u.port
    return f"{u.scheme}://{u.hostname}" + (f":{port}" if port else "")


def log_relayed(
    provider: ProviderConfig,
    status: int,
    how: str = "relayed to the client",
    *,
    request: httpx.Request | None = None,
) -> None:
    """One line for a provider's own error answer, which the proxy relays: who answered and
    with what status (a 5xx at WARNING, a 4xx at INFO, as the proxy's own errors). Never its
    body, which may quote the request. A 401 or 403 to the proxy's own key (``apiKeyEnv``)
    is at WARNING and names the variable: every tenant's request fails so until the
    operator fixes it, while the clients, whose keys are fine, cannot. When the call
    (``request``) carried a client's key in its query too (``?api-key=``), that key may be
    the one refused, and the line says so."""
    variable = provider.api_key_env
    if status in (401, 403) and provider.own_key(os.environ):
        query_key = query_key_sent(request)
        also, whose = "", "that variable's key"
        if query_key:
            also, whose = " and a key the client sent in the query", f"{whose}, or the client's"
        log.warning(
            "%s answered %d to the proxy's key in $%s%s; %s (check %s)",
            provider_name(provider),
            status,
            variable,
            also,
            how,
            whose,
        )
        return
    level = logging.WARNING if status >= 500 else logging.INFO
    log.log(level, "%s answered %d; %s", provider_name(provider), status, how)


def log_stream_error(provider: ProviderConfig, status: int, label: str) -> None:
    """One line for a provider's error in a stream, naming its type and code (``label``), not
    its text."""
    log.warning(
        "%s answered %d with an error in its stream (%s)", provider_name(provider), status, label
    )


def completion(resp: Answer, provider: ProviderConfig) -> tuple[dict[str, Any], bool]:
    """A 2xx answer's chat completion, and whether it was built from its chunks (the
    provider streamed it, ``stream_whole.stream_completion``: the client, who asked for a
    whole answer, gets the completion, not the provider's bytes); anything else the provider
    sent is a 502, one whose choices or tool calls are malformed too (the 502's message,
    logged, names the provider and what was wrong, never the content), and an error object
    sent as a success, whose 502 quotes its message while the log line names only its type
    and code (both without the credential the call sent)."""
    try:
        data, parsed, streamed = resp.json(), True, False
    except ValueError:  # a stream where a whole answer belongs is read as its chunks build
        data, streamed = stream_whole.stream_completion(resp.content), True
        parsed = data is not None
    if (failure := chunk_faults.error_answer(data)) is not None:
        note_bad_answer(provider.name, "error_answer")
        err, label = failure
        said = (
            f"{provider_name(provider)} answered {resp.status_code} with an error, not a completion"
        )
        message, label = resp.scrub(str(err.get("message"))), resp.scrub(label)
        raise UpstreamBadResponse(f"{said}: {message}", log_message=f"{said} ({label})")
    why = chunk_faults.malformed(data, "message") if isinstance(data, dict) else None
    if not isinstance(data, dict) or why is not None:
        note_bad_answer(provider.name, UpstreamBadResponse.__name__)
    if not isinstance(data, dict):
        kind = resp.headers.get("content-type") or "no content type"
        hint = "check the provider's baseUrl"
        if "json" in kind and not parsed:  # the right provider, a broken answer
            hint = (
                "its JSON does not parse (cut short, not UTF-8, nested too deep, or a number "
                "too long to read); retry the request"
            )
        raise UpstreamBadResponse(
            f"{provider_name(provider)} answered {resp.status_code} with a body that is not a "
            f"JSON chat completion ({kind}); {hint}"
        )
    if why is not None:
        raise UpstreamBadResponse(
            f"{provider_name(provider)} answered a malformed chat completion ({why})"
        )
    return data, streamed
