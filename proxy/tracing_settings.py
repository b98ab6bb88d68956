"""Tracing's settings judged as the start judges them, without building an exporter
(``cascade-proxy config check`` too): which exporters ``CASCADE_TRACING`` and OpenTelemetry's
own variables ask for, and whether the OTLP exporter could use its protocol, endpoints and
headers. What it refuses is a :class:`~proxy.settings.SettingsError` naming the variable,
never a value that may hold a credential."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from proxy.settings import SettingsError

__all__ = ["OTLP_ENV", "check_tracing", "otlp_target"]

OTLP_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_EXPORTERS = ("otlp", "console")  # OTEL_TRACES_EXPORTER's values this proxy has


def _exporters(mode: str, env: Mapping[str, str]) -> list[str]:
    """The exporters tracing is on with, none when it is off: ``OTEL_SDK_DISABLED=true`` (the
    specification's boolean: ``true`` in any case, anything else false) and
    ``CASCADE_TRACING=off`` first, then the exporter ``CASCADE_TRACING`` names, then those of
    ``OTEL_TRACES_EXPORTER`` (``none`` is no exporter), then OTLP when an endpoint is set."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or mode == "off":
        return []
    if mode in _EXPORTERS:
        return [mode]
    if named := env.get("OTEL_TRACES_EXPORTER", "").strip().lower():
        names = [n for n in (part.strip() for part in named.split(",")) if n and n != "none"]
        if unknown := [n for n in names if n not in _EXPORTERS]:
            raise SettingsError(
                f"OTEL_TRACES_EXPORTER names {', '.join(map(repr, unknown))}, which this "
                "proxy does not have: otlp (OTLP/HTTP), console, or none"
            )
        return list(dict.fromkeys(names))
    return ["otlp"] if any(env.get(name) for name in OTLP_ENV) else []


def otlp_target(env: Mapping[str, str]) -> str:
    """Where the OTLP/HTTP exporter sends spans, as it resolves it (the traces' own endpoint
    as given, else the general one with ``/v1/traces`` added, else its default), without
    the URL's user, password, query or fragment: only the place, which is no secret."""
    own = env.get(OTLP_ENV[1], "").strip()
    base = env.get(OTLP_ENV[0], "").strip()
    parts = urlsplit(own or base or "http://localhost:4318/v1/traces")
    path = parts.path
    if base and not own:
        path += "v1/traces" if path.endswith("/") else "/v1/traces"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, path, "", ""))


def _check_protocol(env: Mapping[str, str]) -> None:
    """The exporter speaks OTLP/HTTP with protobuf: a protocol variable naming another
    (``grpc``, ``http/json``) is refused, the traces' own first as OpenTelemetry reads them;
    followed, the exporter would send protobuf over HTTP to a gRPC port and fail every batch."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if value := env.get(name, "").strip():
            if value.lower() != "http/protobuf":
                raise SettingsError(
                    f"{name} is {value!r}: this proxy exports OTLP over HTTP only"
                    " (http/protobuf, to a collector's 4318)"
                )
            return


def _check_endpoints(env: Mapping[str, str]) -> None:
    """An OTLP endpoint set that is no http(s) URL with a host is refused, naming the
    variable and not its value (it may carry a user and password): the exporter would take
    it and fail each batch of spans, one ERROR line a batch, exporting none. So is a query or
    fragment on the general endpoint the traces go to, which the exporter's ``/v1/traces``
    would follow."""
    for name in OTLP_ENV:
        if value := env.get(name, "").strip():
            try:
                u = urlsplit(value)
                usable = u.scheme in ("http", "https") and bool(u.hostname) and u.port != 0
            except ValueError:
                usable = False
            if not usable:
                raise SettingsError(
                    f"{name}: not an http(s) URL with a host (OTLP/HTTP, as"
                    " http://otel-collector:4318)"
                )
            # the exporter appends /v1/traces to the general one as a string, after any query
            general = name == OTLP_ENV[0] and not env.get(OTLP_ENV[1], "").strip()
            if general and (u.query or u.fragment):
                raise SettingsError(
                    f"{name}: has a query string or fragment, which the exporter would put"
                    " /v1/traces after; give the URL up to its path, or the traces' whole"
                    " URL, query included, as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
                )


_HEADERS_ENV = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")


class _Refusals(logging.Filter):
    """Counts, and drops, what OpenTelemetry's header parser says of an entry it refuses."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        self.count += 1
        return False


def _check_headers(env: Mapping[str, str]) -> None:
    """The exporter's headers (the traces' own variable, else the general one, as the
    exporter reads them), each entry judged as the exporter judges it. One that is no
    ``name=value`` pair (``x-api-key:KEY``, HTTP's spelling) the exporter drops with a
    warning quoting it, the collector's key with it, and the collector then refuses every
    batch: the start is refused, naming the variable and the entry's place, never its text."""
    from opentelemetry.util.re import parse_env_headers

    name = next((n for n in _HEADERS_ENV if env.get(n)), None)
    if name is None:
        return
    parser = logging.getLogger("opentelemetry.util.re")
    # split as the parser splits, blanks around each comma with it: an entry of blanks alone
    # (``a=b, ``) is then empty, which the parser skips, not a header it refuses
    for place, entry in enumerate(re.split(r"[ \t]*,[ \t]*", env[name]), 1):
        refusals = _Refusals()
        parser.addFilter(refusals)
        try:
            parse_env_headers(entry, liberal=True)
        finally:
            parser.removeFilter(refusals)
        if refusals.count:
            raise SettingsError(
                f"{name}: entry {place} is not name=value (the exporter would drop it);"
                " give comma-separated pairs, as api-key=KEY,x-tenant=t1"
            )


def check_tracing(mode: str, env: Mapping[str, str]) -> list[str]:
    """The exporters ``mode`` (``CASCADE_TRACING``) and the OpenTelemetry environment ask
    for, judged as the start judges them, without building any (``config check`` too);
    raises :class:`SettingsError` naming what it refuses."""
    exporters = _exporters(mode.strip().lower(), env)
    if "otlp" in exporters:
        _check_protocol(env)
        _check_endpoints(env)
    if exporters:
        try:
            import opentelemetry.sdk.resources  # noqa: F401  (the extra's: is it installed?)
            import opentelemetry.sdk.trace.export  # noqa: F401
        except ImportError as exc:
            raise SettingsError(
                "tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER or "
                "CASCADE_TRACING) but OpenTelemetry is not installed: "
                "pip install 'cascade-proxy[tracing]'"
            ) from exc
    if "otlp" in exporters:
        _check_headers(env)
    return exporters
