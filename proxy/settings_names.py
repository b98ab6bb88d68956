"""Which ``CASCADE_*`` variables the process reads: a variable none of them names is a typo,
said once at start (:func:`unknown_variables`) with the setting it most resembles."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from proxy.settings import Settings

__all__ = ["OTHER_VARIABLES", "unknown_variables"]

_SERVICE_LINK = re.compile(
    r"CASCADE_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT_\d+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)"
)
"""The variables Kubernetes sets for a Service named ``cascade`` (service links)."""


OTHER_VARIABLES = frozenset(
    {
        "CASCADE_URL",  # the session and memory commands (cascade-proxy sessions …)
        "CASCADE_API_KEY",
        "CASCADE_DB_PASSWORD",  # docker compose's .env
        "CASCADE_PUBLISH_PORT",
        "CASCADE_BENCH_UPSTREAM",  # bench/ and the test suites
        "CASCADE_BENCH_PROFILE",  # the proxy bench.longrun --profile starts
        "CASCADE_TRAJECTORIES",
        "CASCADE_RELIABILITY_REPORT",
        "CASCADE_SOAK",
        "CASCADE_UPDATE_SNAPSHOT",
        "CASCADE_UPDATE_SCREENSHOT",
        "CASCADE_CONSOLE_SCREENSHOT",
        "CASCADE_CHROMIUM",
    }
)
"""``CASCADE_*`` variables the project reads elsewhere than :class:`Settings`; with
``CASCADE_TEST_*`` (test helpers) they are never taken for a typo."""


def unknown_variables(environ: Mapping[str, str], referenced: Iterable[str] = ()) -> str | None:
    """One line naming the ``CASCADE_*`` variables nothing reads, each with the setting it is
    closest to (difflib), if any; None when there is none. ``referenced`` are the variables
    the config names (``keyEnv``, ``apiKeyEnv``, ``metricsKeyEnv``). Only names are quoted,
    never values: a secret set under a misspelt name stays out of the log."""
    prefix = "CASCADE_"
    # Compared without the prefix every name shares, or any short name would look close.
    known = {}
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias  # DATABASE_URL is read, not CASCADE_DATABASE_URL
        known.update(
            {alias: alias} if isinstance(alias, str) else {name.upper(): prefix + name.upper()}
        )
    known.update({name.removeprefix(prefix): name for name in OTHER_VARIABLES})
    referenced = set(referenced)
    read = set(known.values())
    found = []
    for name in sorted(environ):
        upper = name.upper()  # pydantic-settings reads cascade_port as CASCADE_PORT
        if not upper.startswith(prefix) or upper.startswith(prefix + "TEST_"):
            continue
        if upper in read or name in referenced or _SERVICE_LINK.fullmatch(upper):
            continue
        close = difflib.get_close_matches(upper.removeprefix(prefix), known, n=1, cutoff=0.75)
        found.append(f"{name} (did you mean {known[close[0]]}?)" if close else name)
    if not found:
        return None
    return (
        f"unknown environment variable{'s' if len(found) > 1 else ''} ignored: "
        f"{', '.join(found)}; the settings are listed in README, Configuration"
    )
