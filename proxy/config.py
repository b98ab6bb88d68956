"""config/agents.json: the pydantic schema, defaults, and a pure loader.

The ``context`` section's blocks, which the cascade reads, are in ``config_context.py``;
here are the rest of the file (providers, models, agents, embedding, auth), ``Config`` and
the loader, which merges each agent's ``context`` over the top-level one; reading the file
into a JSON object is ``config_file.py``'s.

Keys are camelCase in the file and snake_case in Python; the file's snake_case spelling of
a key is read as its camelCase one, in an agent's ``context`` too (``camel_keys``). Every key
is optional. Secrets are never read from the file: a provider names the environment
variable that holds its key (``apiKeyEnv``), and auth keys name theirs (``keyEnv``).

Decisions where DESIGN.md is silent:
- Unknown keys are rejected (``extra="forbid"``) so a typo shows up as ``config.rejected``
  instead of silently doing nothing.
- Without a ``providers`` block the default provider ``openai`` reads ``OPENAI_BASE_URL``
  (default ``https://api.openai.com/v1``) and ``OPENAI_API_KEY`` from the environment.
- ``models.<prefix>.reservedOutput`` (default 4096) is the output budget the overflow guard keeps
  free when a request sets no ``max_tokens``/``max_completion_tokens``. A ``reservedOutput``
  an entry sets must be less than its own ``contextLimit``, else the file is refused. The
  default is not checked: a small window kept for clients that always send ``max_tokens``
  (a fast model that only writes summaries) stays valid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from proxy.config_checks import (
    ConfigError,
    VariableName,
    camel_keys,
    check_blanks,
    check_key_values,
    check_patterns,
    check_prefixes,
    check_urls,
    refusal,
)
from proxy.config_context import Block, ContextConfig, unknown_key_hint
from proxy.config_file import check_references, read_object
from proxy.config_warnings import config_warnings
from proxy.settings import describe_errors

__all__ = [
    "Config",
    "ConfigError",
    "ProviderConfig",
    "ModelConfig",
    "AgentConfig",
    "EmbeddingConfig",
    "AuthConfig",
    "AuthKeyConfig",
    "load_config",
    "parse_config",
    "config_warnings",
    "DEFAULT_OPENAI_BASE_URL",
    "AGENT_NAME",
    "TENANT_MAX_BYTES",
]

AGENT_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,256}")
"""An agent's name as the memory API takes it in the scope ``agent:<name>`` its facts are
promoted to (``proxy.services.memory``): a model's name may be one (``llama3:8b``,
``openai/gpt-4o``), so any text but an overlong one or one with a control character. The
config refuses other names, whose facts no client could list, add to or delete, and the empty
one, which no request reaches either (a ``model`` of ``""`` takes ``default``)."""

TENANT_MAX_BYTES = 256
"""The most bytes a proxy key's tenant takes as a JSON string: a persisted event's
notification carries it beside the session id and up to 7400 bytes of data (migration 0004),
and past NOTIFY's 8000 the event's INSERT fails, a request's write with it."""

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"


class ProviderConfig(Block):
    """A provider. ``caFile`` is a PEM bundle trusted for this provider instead of the default
    CAs; ``verifyTls`` false skips certificate checks for it. ``apiVersion`` is sent as the
    ``api-version`` query parameter of every call to it (an Azure deployment URL's calls
    each need one: ``config_warnings``), in place of one a client sent. ``name`` is
    its key under ``providers`` (set by ``parse_config``, not a file key), for messages that
    name it."""

    base_url: str = DEFAULT_OPENAI_BASE_URL
    api_key_env: VariableName | None = None
    timeout_seconds: float = Field(default=600.0, gt=0)
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    ca_file: str | None = None
    verify_tls: bool = True
    api_version: str | None = Field(default=None, min_length=1, pattern=r"^[!-~]+$")
    name: str = Field(default="", exclude=True)

    def own_key(self, env: Mapping[str, str]) -> str | None:
        """The proxy's own key for this provider, read from ``env`` by ``apiKeyEnv`` and
        stripped (a secret is often written with a trailing newline); None when unset or
        blank, and then the client's own bearer is what goes upstream."""
        key = env.get(self.api_key_env) if self.api_key_env else None
        return (key.strip() or None) if key else None


class ModelConfig(Block):
    """``systemMessages``: whether the model takes a system message, for the proxy's own
    instructions (unset: all but OpenAI's ``o1-mini`` and ``o1-preview``;
    ``services/system_role.py``)."""

    context_limit: int = Field(default=128_000, gt=0)
    reserved_output: int = Field(default=4096, ge=0)
    system_messages: bool | None = None


class AgentConfig(Block):
    provider: str = "openai"
    model: str | None = None
    fast_model: str | None = None
    context: dict[str, Any] = Field(default_factory=dict)


BUILTIN_DIMENSIONS = (64, 128, 256)
"""What the builtin wordllama-l2 model's 256-dimension weights can be cut to (matryoshka)."""


class EmbeddingConfig(Block):
    """The embedder of the retrieval stage (``proxy/embeddings.py``). ``provider``:
    ``"builtin"`` (wordllama, offline; ``model`` and ``dimensions`` name its size) or the name
    of a provider under ``providers``, called at its OpenAI-compatible ``/embeddings``.
    ``dimensions`` is sent to a provider only when the file sets it; the stored dimension is
    always the one the model returned. ``batchSize``: messages per background batch."""

    provider: str = "builtin"
    model: str = "wordllama-l2-256"
    dimensions: int = Field(default=256, gt=0, le=16000)
    batch_size: int = Field(default=128, gt=0, le=2048)


class AuthKeyConfig(Block):
    """A proxy key: the variable holding it, the tenant it acts as, and, when ``agents`` is
    given, the only agents it may run (chat, models, embeddings, compaction) and whose
    sessions it reaches; see ``proxy.auth``."""

    key_env: VariableName = Field(min_length=1)
    tenant: str = Field(min_length=1)
    agents: tuple[str, ...] | None = Field(default=None, min_length=1)


class AuthConfig(Block):
    """``keys``: proxy keys; with any, every route but the probes (``/healthz``, ``/readyz``)
    and the ``/ui`` shell needs one. ``metricsKeyEnv``: a variable holding a key that opens
    ``/metrics`` only (for a scraper), and the only key ``/metrics`` then takes, in either
    mode."""

    keys: tuple[AuthKeyConfig, ...] = ()
    metrics_key_env: VariableName | None = None


def _check_agent_name(name: str) -> None:
    if not name:  # a template filled from an unset variable writes it
        raise ValueError(
            "agents: an empty name is no agent: a request reaches none by it (a model of '' "
            "takes 'default') and no memory scope names it; name the agent, or use 'default'"
        )
    if not AGENT_NAME.fullmatch(name):
        raise ValueError(
            f"agents: the name {name[:40]!r}{'...' if len(name) > 40 else ''} is no memory "
            "scope (agent:<name>): an agent's name is at most 256 characters, none a control "
            "character"
        )


def _check_lookup_names(models: Iterable[str], agents: Iterable[str]) -> None:
    """An agent's or a model prefix's name is matched exactly against a request's ``model``:
    one with a space at an end (a template's, a paste's) matches none of the models it
    names, and was taken and never used, without a word (``Default`` is a name a model may
    bear: warned of, ``config_warnings.config_warnings``)."""
    for block, names in (("models", models), ("agents", agents)):
        for name in names:
            _check_lookup_name(block, name)


def _check_lookup_name(block: str, name: str) -> None:
    if name.strip() and name != name.strip():
        raise ValueError(
            f"{block}: the name {name.strip()!r} has a space at an end, which a model's name "
            "has not; write the name alone"
        )


def _check_tenant(i: int, tenant: str) -> None:
    if "\x00" in tenant:  # PostgreSQL's text holds none: each request would fail storing it
        raise ValueError(f"auth.keys[{i}].tenant: holds a NUL, which the database cannot store")
    if len(json.dumps(tenant, ensure_ascii=False).encode()) - 2 > TENANT_MAX_BYTES:
        raise ValueError(
            f"auth.keys[{i}].tenant: longer than {TENANT_MAX_BYTES} bytes (UTF-8, as a JSON "
            "string), which an event's notification carries beside its data"
        )


class Config(Block):
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    embedding: EmbeddingConfig = EmbeddingConfig()
    auth: AuthConfig = AuthConfig()
    context: ContextConfig = ContextConfig()
    _resolved: dict[str, ContextConfig] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check_refs(self) -> Config:
        _check_lookup_names(self.models, self.agents)
        for name, agent in self.agents.items():
            _check_agent_name(name)
            if agent.provider not in self.providers:
                raise ValueError(f"agents.{name}.provider {agent.provider!r} is not in providers")
        first: dict[str, int] = {}
        for i, key in enumerate(self.auth.keys):
            unknown = sorted(set(key.agents or ()) - set(self.agents) - {"default"})
            if unknown:
                raise ValueError(f"auth.keys[{i}].agents: {', '.join(unknown)} not in agents")
            _check_tenant(i, key.tenant)
            if (j := first.setdefault(key.key_env, i)) != i:  # the gate takes the first match
                raise ValueError(
                    f"auth.keys[{i}].keyEnv: ${key.key_env} is auth.keys[{j}]'s too; a key is "
                    "one entry (one tenant, one agents list), and only the first would match"
                )
        if (metrics := self.auth.metrics_key_env) in first:  # it would open /metrics
            raise ValueError(
                f"auth.metricsKeyEnv: ${metrics} is auth.keys[{first[metrics]}]'s keyEnv too; "
                "the metrics key opens /metrics only, so it must be a key of its own"
            )
        for name, limits in self.models.items():  # else every request without max_tokens is a 400
            given = "reserved_output" in limits.model_fields_set
            if given and limits.reserved_output >= limits.context_limit:
                raise ValueError(
                    f"models.{name}.reservedOutput ({limits.reserved_output}) must be less than "
                    f"its contextLimit ({limits.context_limit})"
                )
        e = self.embedding
        if e.provider == "builtin":
            if not e.model.startswith("wordllama") or e.dimensions not in BUILTIN_DIMENSIONS:
                raise ValueError(
                    f"embedding: the builtin provider runs wordllama-l2 at "
                    f"{'/'.join(map(str, BUILTIN_DIMENSIONS))} dimensions, not "
                    f"{e.model!r} at {e.dimensions}; set model 'wordllama-l2-256' and "
                    "dimensions 256, or name a provider"
                )
        elif e.provider not in self.providers:
            raise ValueError(
                f"embedding.provider {e.provider!r} is neither 'builtin' nor in providers"
            )
        return self

    def agent_for(self, model: str | None) -> tuple[str, AgentConfig]:
        """A request's ``model`` selects an agent when it names one, else ``default``."""
        if model and model in self.agents:
            return model, self.agents[model]
        found = self.agents.get("default")  # not .get(key, AgentConfig()): that builds one
        return "default", found if found is not None else AgentConfig()  # per request

    def agent_providers(self) -> set[str]:
        """The providers the agents call (each agent's ``provider``), by name: the ones a
        chat request reaches. A provider no agent names (the built-in ``openai`` once every
        agent names another) takes no client's request: the gate, the load warnings and the
        key checks judge the keys of these."""
        return {agent.provider for agent in self.agents.values()}

    @property
    def resolved(self) -> dict[str, ContextConfig]:
        """Each agent's ``context`` merged over the top-level one, computed once at load: no
        field, so a file naming ``resolved`` is refused by the schema as any unknown key."""
        return self._resolved

    def context_for(self, agent: str) -> ContextConfig:
        return self.resolved.get(agent, self.context)

    def variables(self) -> set[str]:
        """The environment variables the file names (``apiKeyEnv``, ``keyEnv``,
        ``metricsKeyEnv``): read, though not settings."""
        names = {p.api_key_env for p in self.providers.values()} | {self.auth.metrics_key_env}
        return {n for n in names if n} | {k.key_env for k in self.auth.keys}

    def model_limits(self, model: str) -> ModelConfig:
        """Longest matching prefix in ``models``, then ``default``, then the built-in default."""
        best = None
        for prefix in self.models:
            fits = prefix != "default" and model.startswith(prefix)
            if fits and (best is None or len(prefix) > len(best)):
                best = prefix
        if best is not None:
            return self.models[best]
        found = self.models.get("default")
        return found if found is not None else ModelConfig()


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_config(raw: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Validate a parsed agents.json; raise :class:`ConfigError` with pydantic's reasons on one
    line, never the values they refused (``settings.describe_errors``)."""
    env = env or {}
    check_references(raw)
    data = dict(raw)
    for block in ("providers", "agents"):  # filled in below, so their shape is checked first
        if block in data and not isinstance(data[block], Mapping):  # null or [] too, as models'
            raise ConfigError(f'{block}: must be an object of named entries, {{"name": {{…}}}}')
    providers = dict(data.get("providers") or {})
    if "openai" not in providers:
        providers["openai"] = {
            "baseUrl": env.get("OPENAI_BASE_URL") or DEFAULT_OPENAI_BASE_URL,
            "apiKeyEnv": "OPENAI_API_KEY",
        }
    data["providers"] = providers
    data = camel_keys(Config, data, "")
    if "default" not in (data.get("agents") or {}):
        data["agents"] = {**(data.get("agents") or {}), "default": {}}
    for name, provider in providers.items():
        if isinstance(provider, Mapping) and "name" in provider:
            raise ConfigError(f"providers.{name}.name: not a key; the provider's name is {name}")
    try:
        cfg = Config.model_validate_json(_as_json(data), strict=True)
        cfg = cfg.model_copy(
            update={
                "providers": {
                    name: p.model_copy(update={"name": name}) for name, p in cfg.providers.items()
                }
            }
        )
        base = cfg.context.model_dump(by_alias=True)
        resolved = {}
        for name, agent in cfg.agents.items():
            try:
                over = camel_keys(ContextConfig, agent.context, f"agents.{name}.context")
                merged = _as_json(_deep_merge(base, over))
                resolved[name] = ContextConfig.model_validate_json(merged, strict=True)
            except ValidationError as exc:
                said = describe_errors(exc, form=unknown_key_hint, said=refusal)
                raise ConfigError(refusal(f"agents.{name}.context", said)) from exc
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, form=unknown_key_hint, said=refusal)) from exc
    check_blanks(cfg)
    check_urls(cfg, from_env="openai" not in (raw.get("providers") or {}))
    check_key_values(cfg, env)
    for name, ctx in resolved.items():  # compiled per request: a bad one must fail here
        where = "context" if name == "default" else f"agents.{name}.context"
        check_patterns(ctx.redaction.patterns, f"{where}.redaction.patterns")
        check_prefixes(ctx.observations.user_prefixes, f"{where}.observations.userPrefixes")
    cfg._resolved = resolved
    return cfg


def _as_json(data: Mapping[str, Any]) -> str:
    """``data`` as the file's JSON, for pydantic's strict JSON mode: a value must be of its
    key's JSON type. Lax mode would read ``true`` as the number 1 (a ``contextLimit`` of one
    token) and ``"no"`` or ``0`` as false; a whole number still counts for a fraction or a
    time."""
    return json.dumps(data, allow_nan=True)


def load_config(
    path: str | Path | None, env: Mapping[str, str] | None = None, data: bytes | None = None
) -> Config:
    """Read and validate the config file; a missing path means all defaults. ``data``: the
    file's bytes as the caller read them (the watcher judged those complete), so that what
    is loaded is what was judged, not the file again, which an editor may be writing."""
    if path is None:
        return parse_config({}, env)
    return parse_config(read_object(path, data), env)
