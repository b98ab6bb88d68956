"""What a valid config/agents.json asks for that will not happen: ``config_warnings``, the
lines the log gets at load and at each reload (a refusal is ``config_checks``'s).

A warning names the key and what follows from it (a request no key can make, a provider
called without credentials, a model entry that does not inherit from ``default``), never a
value a variable holds: the lines go to the log, where a secret must not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from proxy.config_checks import field_alias, refusal

if TYPE_CHECKING:
    from proxy.config import Config

__all__ = ["config_warnings"]

_AZURE_DEPLOYMENT = re.compile(r"/openai/deployments/[^/]+/?$", re.IGNORECASE)
"""An old-style Azure OpenAI baseUrl's path, a deployment's, whose API takes no call without
its ``api-version`` (``config_warnings``)."""


def config_warnings(cfg: Config, env: Mapping[str, str]) -> list[str]:
    """What a valid config asks for that will not happen, for the log at load and reload:
    proxy keys whose variable is unset, providers left without credentials in proxy-key mode
    (the client's token is then the proxy's secret and is never forwarded), an embedding
    provider without credentials (it is called in the background, never with a client's
    token), an Azure deployment baseUrl with no ``apiVersion``. A variable of only blanks
    (an empty secrets file's newline) is no key, as the gate and the provider calls read it
    (stripped): it is said to be blank. And a model prefix or agent named ``default`` in
    another case, which is not the fallback, and a ``models`` entry that leaves out what
    ``models.default`` sets (``_not_inherited``)."""
    out = [
        f"{block}: {name!r} is not the fallback default (names are matched case by case): "
        f"it is the {what} {name} only"
        for block, names, what in (
            ("models", cfg.models, "window of a model whose name starts with"),
            ("agents", cfg.agents, "agent of a request whose model is"),
        )
        for name in names
        if name.lower() == "default" != name
    ]
    out += _not_inherited(cfg)
    out += [
        refusal(
            f"auth key of tenant {key.tenant!r}",
            f"${key.key_env} is {state}, no request can use it",
        )
        for key in cfg.auth.keys
        if (state := _missing(env, key.key_env))
    ]
    metrics_env = cfg.auth.metrics_key_env
    if metrics_env and (state := _missing(env, metrics_env)):
        opens = "with a proxy key only" if cfg.auth.keys else "without a key"
        out.append(f"auth.metricsKeyEnv: ${metrics_env} is {state}, so /metrics answers {opens}")
    used = cfg.agent_providers() if cfg.auth.keys else set()
    for name in sorted(used):
        key_env = cfg.providers[name].api_key_env
        if not key_env or _missing(env, key_env):
            fix = f"set ${key_env}" if key_env else "give it an apiKeyEnv"
            out.append(
                f"provider {name!r} will be called without credentials (proxy keys "
                f"are never forwarded): {fix}"
            )
    out += [
        f"providers.{name}.baseUrl: an Azure deployment URL, whose every call needs an "
        "api-version; without apiVersion only a client's extra_query sends one (never "
        "AzureOpenAI's, the embedder's or /compact's calls): set apiVersion, or use /openai/v1"
        for name, p in cfg.providers.items()
        if p.api_version is None and _AZURE_DEPLOYMENT.search(urlsplit(p.base_url).path)
    ]
    emb = cfg.embedding.provider
    if emb != "builtin" and any(c.retrieval.enabled for c in (cfg.context, *cfg.resolved.values())):
        key_env = cfg.providers[emb].api_key_env
        if not key_env or _missing(env, key_env):
            fix = f"set ${key_env}" if key_env else "give it an apiKeyEnv if it needs a key"
            out.append(
                f"embedding provider {emb!r} is called without credentials (embedding runs "
                f"in the background, with no client's token): {fix}"
            )
    return out


def _not_inherited(cfg: Config) -> list[str]:
    """An entry is the whole of its models' settings (README, Decisions): one setting only
    ``systemMessages`` beside a ``default`` of a larger window shrinks its models' window
    unseen. Each entry that leaves out fields ``default`` sets to other than the built-in
    value is one line naming them (the warnings are said again at each reload)."""
    fallback = cfg.models.get("default")
    if fallback is None:
        return []
    builtin = type(fallback)()
    dropped = [
        f for f in sorted(fallback.model_fields_set) if getattr(fallback, f) != getattr(builtin, f)
    ]
    out = []
    for name, entry in cfg.models.items():
        fields = [f for f in dropped if f not in entry.model_fields_set]
        if name == "default" or not fields:
            continue
        keys = ", ".join(field_alias(type(fallback), f) for f in fields)
        got = ", ".join(_spelled(getattr(builtin, f)) for f in fields)
        wanted = ", ".join(_spelled(getattr(fallback, f)) for f in fields)
        it = "it" if len(fields) == 1 else "them"
        said = f"sets no {keys}, so its models get the built-in {got}, not models.default's "
        said += f"{wanted} (an entry does not inherit from default); set {it} in the entry if "
        out.append(refusal(f"models.{name}", said + "that is not what you meant"))
    return out


def _spelled(value: object) -> str:
    """A setting's value as the config file writes it (``false``); unset as what it means."""
    if value is None:
        return "unset (by the model's name)"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _missing(env: Mapping[str, str], name: str) -> str | None:
    """``unset`` or ``blank`` when the variable ``name`` holds no key, else None."""
    value = env.get(name)
    return "unset" if not value else None if value.strip() else "blank"
