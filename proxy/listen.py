"""The listen-address rule: without proxy keys, loopback is the only protection, so the
proxy refuses at start to listen beyond it (``listen_policy``) unless unauthenticated
listening is allowed, and then warns of what that opens (``open_listen_warning``). A server
started on another address than it says is caught per request by the gate (``auth.py``).
``/metrics`` without a metrics key beyond loopback is a warning too (``open_metrics_warning``),
at start and on a reload that opens it (``reload_told``).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Callable, Mapping

from proxy.config import Config

__all__ = [
    "InsecureListen",
    "is_loopback",
    "listen_policy",
    "open_listen_warning",
    "open_metrics_warning",
    "reload_told",
]

log = logging.getLogger("cascade")


class InsecureListen(Exception):
    """A non-loopback listen address with no proxy keys, not explicitly allowed."""


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP; anything else (``0.0.0.0``, a name) is not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def listen_policy(host: str, cfg: Config, *, allow_unauthenticated: bool) -> bool:
    """Whether the gate must require keys (see ``ProxyAuth``); raises ``InsecureListen`` for a
    non-loopback ``host`` with no proxy keys unless ``allow_unauthenticated``
    (:func:`open_listen_warning` then says what that opens)."""
    if is_loopback(host) or allow_unauthenticated:
        return False
    if not cfg.auth.keys:
        raise InsecureListen(
            f"refusing to listen on {host} without proxy keys: anyone who can reach it could "
            "spend the provider keys and read sessions. Configure auth.keys, listen on "
            "127.0.0.1, or allow it: serve --allow-unauthenticated or "
            "CASCADE_ALLOW_UNAUTHENTICATED=1"
        )
    return True


def open_listen_warning(host: str, cfg: Config, *, allow_unauthenticated: bool) -> str | None:
    """The warning a non-loopback ``host`` with no proxy keys, allowed by
    ``allow_unauthenticated``, deserves; None for any other. The server logs it once it
    listens (the lifespan, after the bind): a start that fails to bind warns of nothing."""
    if is_loopback(host) or not allow_unauthenticated or cfg.auth.keys:
        return None
    return (
        f"listening on {host} with no proxy keys (allowed by --allow-unauthenticated or "
        "CASCADE_ALLOW_UNAUTHENTICATED=1): anyone who can reach it can use the providers and "
        "read each other's sessions; configure auth.keys"
    )


def open_metrics_warning(host: str, cfg: Config, env: Mapping[str, str]) -> str | None:
    """The warning a non-loopback ``host`` whose ``/metrics`` takes no metrics key of its own
    (``auth.metricsKeyEnv`` unset, or its variable holding no key) deserves; None for any
    other. The metrics count every tenant's requests and name the models clients send: on
    loopback the machine's own users read them (README Decisions), beyond it any proxy key
    does, or anyone, with no proxy keys."""
    name = cfg.auth.metrics_key_env
    if is_loopback(host) or (name and (env.get(name) or "").strip()):
        return None
    who = "any proxy key" if cfg.auth.keys else "anyone who can reach it"
    why = f"${name} holds no key" if name else "auth.metricsKeyEnv is unset"
    return (
        f"/metrics on {host} answers {who}, since {why}: it counts every tenant's requests "
        "and names the models they send; give the scraper a key of its own in "
        "auth.metricsKeyEnv"
    )


def reload_told(
    host: str, cfg: Config, then: Callable[[Config], None] | None
) -> Callable[[Config], None]:
    """What a reload tells of the config it puts in force (``ConfigHolder.on_reloaded``):
    ``open_metrics_warning`` for a ``/metrics`` that config opens beyond loopback where the
    one before it (first ``cfg``, the start's) did not, or opens to more readers; a reload
    that changes nothing of it says nothing again, as the start said it once. Then ``then``
    (the provider pools' ``keep_only``)."""
    said = [open_metrics_warning(host, cfg, os.environ)]

    def reloaded(new: Config) -> None:
        now = open_metrics_warning(host, new, os.environ)
        if now is not None and now != said[0]:
            log.warning("%s", now)
        said[0] = now
        if then is not None:
            then(new)

    return reloaded
