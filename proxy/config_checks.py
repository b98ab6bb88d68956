"""The checks of a parsed config/agents.json that its pydantic schema cannot express, and
the error every refusal of the file raises (``proxy.config`` loads the file and runs them).

Each names the key at fault and quotes no value (but a date, a baseUrl's ``api-version``,
which holds no secret): a refusal goes to the log and, without proxy keys, to every open
event stream as ``config.rejected``. What a valid file asks for that will not happen is no
refusal: ``proxy.config_warnings`` says it, for the log.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, get_args, get_origin
from urllib.parse import parse_qsl, urlsplit

from pydantic import AfterValidator, BaseModel

from proxy.cascade.redaction import compile_patterns, redact

if TYPE_CHECKING:
    from proxy.config import Config

__all__ = [
    "ConfigError",
    "EnvironmentRefused",
    "VARIABLE",
    "VariableName",
    "camel_keys",
    "field_alias",
    "check_blanks",
    "check_key_values",
    "check_patterns",
    "check_prefixes",
    "check_urls",
    "refusal",
]


class ConfigError(Exception):
    """The config file is missing, not JSON, or does not match the schema."""


class EnvironmentRefused(ConfigError):
    """A refusal of what the environment gave the config (``OPENAI_BASE_URL`` for the default
    provider), not the file: a message naming the file would send the reader there."""


_PROVIDER_KEY_ENV = re.compile(r"providers\.(.+)\.apiKeyEnv")


def refusal(where: str, reason: str) -> str:
    """``where: reason``, the refusal of the key at ``where``; a provider's ``apiKeyEnv`` as
    ``provider <name>: its apiKeyEnv <reason>``: the log's secret scrub reads ``apiKeyEnv:
    …`` as a secret's key and masks the reason after it. Where either form still reads so (a
    key or an entry's name holding ``token``, ``secret``: ``summarize.reflectTokens: Input
    …``), the path, then the reason with no colon (``… is refused: Input should be …``)."""
    if (own := _PROVIDER_KEY_ENV.fullmatch(where)) is None:
        said = f"{where}: {reason.removeprefix('is ')}"
    else:
        said = f"provider {own[1]}: its apiKeyEnv {_verbed(reason)}"
    return said if not redact(said, compile_patterns(()))[1] else f"{where} {_verbed(reason)}"


def _verbed(reason: str) -> str:
    """``reason`` read after a key's name: pydantic's (``Input should be …``) and one with
    no verb (``at most …``) after ``is refused:``."""
    return (
        reason
        if reason.startswith(("is ", "has ", "sets ", "takes ", "$"))
        else f"is refused: {reason}"
    )


VARIABLE = re.compile(r"[A-Za-z_.-][A-Za-z0-9_.-]*")
"""A variable's name as Kubernetes takes it (a Secret's keys by ``envFrom``,
``openai-api-key``), and Docker: the shell's letters, digits and ``_``, and ``-`` and ``.``."""


def _variable_name(value: str) -> str:
    """A name a process environment holds (``VARIABLE``); a blank one is left to
    :func:`check_blanks`, which says what leaving the key out does. A key pasted where its
    variable's name goes (``"apiKeyEnv": "sk-proj-…"``) is refused here, unquoted: the name
    is printed by the start-up block, the warnings and ``config check``. A key of a shape
    the redaction's secret patterns know is one even when it could be a name (``ghp_…``)."""
    if value.strip() and (not VARIABLE.fullmatch(value) or redact(value, compile_patterns(()))[1]):
        raise ValueError(
            "is not an environment variable's name (letters, digits, _, - and ., not starting "
            "with a digit); it names the variable that holds the key, never the key itself"
        )
    return value


VariableName = Annotated[str, AfterValidator(_variable_name)]
"""The type of ``apiKeyEnv``, ``keyEnv`` and ``metricsKeyEnv``."""


def camel_keys(model: type[BaseModel], data: Any, where: str) -> Any:
    """``data``, a block of ``model`` as the file gives it, with each key the snake_case
    spelling of one of the block's keys renamed to its camelCase one, nested blocks too
    (named entries such as ``providers.<name>`` and listed ones such as ``auth.keys[i]``).
    ``where`` is the block's place in the file, empty for the whole file.

    The schema reads either spelling (``populate_by_name``), but an agent's ``context`` is
    merged key by key over the top-level one before it is read: a ``tool_output`` there
    would sit beside the top-level ``toolOutput`` and be refused as unknown, so both are
    given their one spelling first. A key given in both spellings in one object is refused,
    naming it (the schema would say only "Extra inputs are not permitted"): JSON keeps both,
    and which would be read is nowhere written. Unknown keys are left for the schema to
    refuse."""
    if not isinstance(data, Mapping):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = field_alias(model, key)
        at = f"{where}.{name}" if where else name
        if name in out:
            other = next(k for k in data if k != key and field_alias(model, k) == name)
            first, second = sorted((key, other), key=lambda k: k != name)
            raise ConfigError(refusal(at, f"is given twice, as {first} and {second}; keep one"))
        sub = model.model_fields.get(_field_name(model, name))
        out[name] = _camel_value(sub.annotation if sub is not None else None, value, at)
    return out


def _camel_value(kind: Any, value: Any, where: str) -> Any:
    """``value`` of a field of type ``kind`` through ``camel_keys``: a block, each entry of
    a ``dict[str, block]``, or each item of a ``tuple[block, ...]``; other values as given."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return camel_keys(kind, value, where)
    args = get_args(kind)
    item = args[-1] if get_origin(kind) is dict else args[0] if get_origin(kind) is tuple else None
    if not (isinstance(item, type) and issubclass(item, BaseModel)):
        return value
    if isinstance(value, Mapping):
        return {k: camel_keys(item, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [camel_keys(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def field_alias(model: type[BaseModel], key: str) -> str:
    field = model.model_fields.get(key)
    return field.alias if field is not None and field.alias else key


def _field_name(model: type[BaseModel], alias: str) -> str:
    for name, field in model.model_fields.items():
        if field.alias == alias:
            return name
    return alias


def check_patterns(patterns: tuple[str, ...], where: str) -> None:
    """Each redaction pattern compiles. A refused one is named by its place, never its text:
    a pattern may spell the secret it scrubs, and the reason reaches the log and, without
    proxy keys, every open event stream."""
    try:
        compile_patterns(patterns, use_defaults=False)
    except ValueError:
        for i, source in enumerate(patterns):
            try:
                re.compile(source)
            except re.error as exc:  # its message gives the position, not the text
                raise ConfigError(f"{where}[{i}]: not a regular expression ({exc})") from None
        raise
    for i, source in enumerate(patterns):
        if _shortest_match(source) == 0:
            raise ConfigError(
                f"{where}[{i}]: can match no characters at all (an empty match is replaced "
                "too: [REDACTED] between every character, or before each word); make it "
                "match at least one character"
            )


def check_prefixes(prefixes: tuple[str, ...], where: str) -> None:
    """No observation prefix is empty or blank: every user message starts with the empty
    one, so it would make each user message after an assistant message an observation, and
    a blank one matches nothing once a message's leading spaces are dropped."""
    for i, prefix in enumerate(prefixes):
        if not prefix.strip():
            raise ConfigError(
                f"{where}[{i}]: empty; every user message starts with it: name the text "
                "observations start with (Observation:), or give [] to manage none"
            )


def _shortest_match(source: str) -> int:
    """The fewest characters a match of the regular expression ``source`` spans."""
    parser: Any = importlib.import_module("re._parser")  # the parser ``re`` compiles with
    return int(parser.parse(source).getwidth()[0])


_API_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}(?:-[a-z]+)?")
"""An Azure ``api-version`` (``2024-10-21``, ``2025-01-01-preview``)."""


def check_urls(cfg: Config, *, from_env: bool) -> None:
    """Each provider's baseUrl is an http(s) URL with a host and, if given, a port 1-65535,
    and no query or fragment: else every request to it would be a 502 (or go elsewhere).
    ``from_env``: the ``openai`` provider's came from ``OPENAI_BASE_URL``, which the message
    then names."""
    for name, provider in cfg.providers.items():
        try:
            u = urlsplit(provider.base_url)
            usable = u.scheme in ("http", "https") and bool(u.hostname) and u.port != 0
        except ValueError:  # a port that is no number or out of range, a stray bracket
            usable = False
        env = name == "openai" and from_env
        where = "OPENAI_BASE_URL" if env else f"providers.{name}.baseUrl"
        refused = EnvironmentRefused if env else ConfigError
        url = provider.base_url
        if url != url.strip() or any(ord(c) < 32 or ord(c) == 127 for c in url):
            # urlsplit drops them, httpx refuses them: each request would be a 502
            raise refused(
                refusal(
                    where,
                    "has a control character, or a space at an end (a template's trailing "
                    "newline?); give the URL alone",
                )
            )
        if not usable:
            raise refused(refusal(where, "is not an http(s) URL with a host (and a port 1-65535)"))
        if u.query or u.fragment or provider.base_url.rstrip("/").endswith(("?", "#")):
            # the request's path (/chat/completions) is appended: it would land in them
            version = dict(parse_qsl(u.query)).get("api-version", "")  # Azure's portal URL's
            dated = _API_VERSION.fullmatch(version) and not env  # quoted: a date, no secret
            fix = f'"apiVersion": "{version}"' if dated else "a key by apiKeyEnv"
            raise refused(
                refusal(
                    where,
                    "has a query string or fragment, which the request paths would follow; "
                    f"give the URL up to its path, and {fix}",
                )
            )


def check_blanks(cfg: Config) -> None:
    """No name the file gives is empty (or only spaces) where empty means nothing: each was
    read as if the key were left out (``caFile: ""`` trusted the default CAs, a ``model``
    of ``""`` sent the request's), a value written but ignored without a word, as a
    template filled from an unset variable writes it. The reason says what leaving the key
    out does. An empty ``baseUrl``, ``provider``, ``keyEnv`` or ``tenant`` is refused by
    the checks of those keys; a ``tenant`` of spaces here."""
    given: list[tuple[str | None, str, str, str]] = []
    for name, p in cfg.providers.items():
        given += [
            (p.ca_file, f"providers.{name}.caFile", "a PEM bundle", "for the default CAs"),
            (
                p.api_key_env,
                f"providers.{name}.apiKeyEnv",
                "the variable holding the provider's key",
                "to forward the client's token",
            ),
        ]
    for name, a in cfg.agents.items():
        given += [
            (a.model, f"agents.{name}.model", "the model sent upstream", "to send the request's"),
            (
                a.fast_model,
                f"agents.{name}.fastModel",
                "the model that writes summaries",
                "to use the request's",
            ),
        ]
    given.append(
        (
            cfg.auth.metrics_key_env,
            "auth.metricsKeyEnv",
            "the variable holding the scraper's key",
            "",
        )
    )
    if "" in cfg.models:  # "" is a prefix of every model: it beat default for all of them
        raise ConfigError(
            "models: an empty name is a prefix of every model, ahead of default; name a "
            "model prefix, or use default"
        )
    for i, key in enumerate(cfg.auth.keys):  # a tenant of spaces: a template's unset variable
        if not key.tenant.strip():
            raise ConfigError(f"auth.keys[{i}].tenant: empty; name the tenant the key acts as")
    if any(not name.strip() for name in cfg.providers):
        raise ConfigError(
            "providers: an empty name; name the provider (agents name it by its provider)"
        )
    for value, where, what, unset in given:
        if value is not None and not value.strip():
            out = f"leave the key out (or null) {unset}".rstrip()
            raise ConfigError(refusal(where, f"is empty; name {what}, or {out}"))
    if not cfg.embedding.model.strip():
        raise ConfigError("embedding.model: empty; name the provider's embedding model")


def check_key_values(cfg: Config, env: Mapping[str, str]) -> None:
    """No two proxy keys' variables hold one key (as the gate reads them, stripped): a
    request with it would only ever be the first entry's. Nor does the ``apiKeyEnv`` of a
    provider an agent or the embedder calls (nor is it a ``keyEnv``): that proxy key would go
    upstream. Nor does the
    metrics key's: that
    proxy key would open /metrics, and the metrics key all that proxy key opens. Unset ones
    match no request."""
    first: dict[str, int] = {}
    for i, key in enumerate(cfg.auth.keys):
        value = (env.get(key.key_env) or "").strip()
        if value and (j := first.setdefault(value, i)) != i:
            other = cfg.auth.keys[j].key_env
            raise ConfigError(
                f"auth.keys[{i}].keyEnv: ${key.key_env} holds the key ${other} (auth.keys[{j}]) "
                "holds; give each entry a key of its own"
            )
    names = {key.key_env: i for i, key in reversed(list(enumerate(cfg.auth.keys)))}
    # a proxy key never leaves the proxy: judged in the providers it calls, not in one no
    # agent names (the default openai, its OPENAI_API_KEY a shell's shared with the clients)
    called = cfg.agent_providers() | {cfg.embedding.provider}
    for name, p in cfg.providers.items():
        if name not in called:
            continue
        value = (env.get(p.api_key_env) or "").strip() if p.api_key_env else ""
        j = names.get(p.api_key_env or "", first.get(value, -1) if value else -1)
        if j >= 0:
            other = cfg.auth.keys[j].key_env
            held = (
                f"is auth.keys[{j}]'s keyEnv too"
                if p.api_key_env == other
                else f"holds the key ${other} (auth.keys[{j}]) holds"
            )
            raise ConfigError(
                refusal(
                    f"providers.{name}.apiKeyEnv",
                    f"${p.api_key_env} {held}; a proxy key never goes upstream: give the "
                    "provider a key of its own",
                )
            )
    metrics = cfg.auth.metrics_key_env
    if metrics and (j := first.get((env.get(metrics) or "").strip(), -1)) >= 0:
        raise ConfigError(
            f"auth.metricsKeyEnv: ${metrics} holds the key ${cfg.auth.keys[j].key_env} "
            f"(auth.keys[{j}]) holds; give the scraper a key of its own"
        )
