"""The replay's policies: which ones there are, how each is configured, the offline ones' replay.

The reference policies (:mod:`bench.policies`) are applied offline to each step's recorded
history; the Cascade policies run the real proxy with the agents.json :func:`proxy_config`
writes (:mod:`bench.replay_driver`). A :class:`Row` is one file, limit and policy's metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench import trajectories
from bench.cost import Metrics, RequestLog, Tokenizer, measure
from bench.policies import POLICIES, make_policy
from bench.replay_ingest import IngestStats

__all__ = [
    "LIMITS",
    "CASCADE_POLICIES",
    "PER_TURN_CONTEXT",
    "SEED_FACTS",
    "HEADROOM",
    "ALL_POLICIES",
    "DEFAULT_POLICIES",
    "MAIN_MODEL",
    "FAST_MODEL",
    "EMBED_MODEL",
    "Row",
    "offline_logs",
    "replay_offline",
    "proxy_config",
]

LIMITS = (32_000, 128_000)
CASCADE_POLICIES = (
    "cascade-default",
    "cascade-nosummary",
    "cascade-perturn",
    "cascade-perturn-auto",
)
PER_TURN_CONTEXT: dict[str, Any] = {
    "recitation": {"enabled": True},
    "memoryPromotion": {"mode": "suggest"},
    "retrieval": {"enabled": True, "timeoutMs": 10_000},  # a loaded machine never times out
}
"""The per-turn stages ``cascade-perturn`` turns on over the defaults."""
SEED_FACTS = (
    "The repository's tests run with pytest.",
    "Keep changes minimal and explain each one.",
)
"""Facts stored before a ``cascade-perturn`` file, so its prompts carry a ``<memory>`` block
from the first step (promotion adds to them after a compaction)."""
HEADROOM = "headroom"
"""The reference proxy (``bench/headroom_env.py``): run only when named, since it installs
Headroom (about 900 MB) in a venv of its own on first use."""
ALL_POLICIES = (*POLICIES, *CASCADE_POLICIES, HEADROOM)
DEFAULT_POLICIES = (*POLICIES, *CASCADE_POLICIES)
MAIN_MODEL = "gpt-4o"
FAST_MODEL = "fast-model"
EMBED_MODEL = "wordllama-l2-256"  # the builtin embedder's model, the config's default


@dataclass(frozen=True, slots=True)
class Row:
    file: int
    name: str
    policy: str
    limit: int
    metrics: Metrics
    errors: int = 0
    seconds: float = 0.0
    ingest: IngestStats | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {
            "file": self.file,
            "name": self.name,
            "policy": self.policy,
            "limit": self.limit,
            "errors": self.errors,
            "seconds": round(self.seconds, 2),
            **self.metrics.as_dict(),
        }
        if self.ingest is not None:
            out["ingest"] = self.ingest.as_dict()
        return out


def offline_logs(
    conversations: Sequence[trajectories.Conversation],
    policy: str,
    limit: int,
    count: Callable[[Sequence[Mapping[str, Any]]], int],
) -> list[RequestLog]:
    """The prompts a reference policy would send: one fresh policy state per conversation."""
    logs: list[RequestLog] = []
    for conv in conversations:
        pol = make_policy(policy, limit=limit, count=count)
        for step in trajectories.steps(conv):
            logs.append(RequestLog(conv.id, tuple(pol(step.prompt))))
    return logs


def replay_offline(
    tf: trajectories.TrajectoryFile, policy: str, limit: int, tokenizer: Tokenizer
) -> Row:
    """Apply a reference policy to every step of every conversation in the file."""
    start = time.monotonic()
    logs = offline_logs(trajectories.load(tf), policy, limit, tokenizer.count)
    metrics = measure(logs, limit=limit, tokenizer=tokenizer)
    return Row(tf.number, tf.name, policy, limit, metrics, 0, time.monotonic() - start)


def proxy_config(
    limit: int,
    policy: str,
    upstream_url: str,
    overrides: Mapping[str, Any] | None = None,
    reserved_fraction: float | None = None,
) -> dict[str, Any]:
    """The agents.json for one Cascade run: the limit, the fast model, summaries on or off.

    ``overrides`` (``python -m bench.replay --context``) are ``context`` blocks merged over the
    policy's, key by key, as a sweep of one setting needs (``{"eviction": {"atFraction": 0.1}}``).
    ``reserved_fraction`` (``--reserved-fraction``) sets the model's ``reservedOutput`` to that
    share of the limit: the default 4096 leaves nothing of a 4k window, so a small-window run
    lowers it.
    """
    context: dict[str, Any] = {}
    if policy == "cascade-nosummary":
        context["summarize"] = {"enabled": False}
    if policy.startswith("cascade-perturn"):
        context.update(PER_TURN_CONTEXT)
    if policy == "cascade-perturn-auto":
        context["memoryPromotion"] = {"mode": "auto"}
    for block, keys in (overrides or {}).items():
        context[block] = {**context.get(block, {}), **keys}
    model: dict[str, Any] = {"contextLimit": limit}
    if reserved_fraction is not None:
        model["reservedOutput"] = int(limit * reserved_fraction)
    return {
        "providers": {"openai": {"baseUrl": upstream_url, "apiKeyEnv": "OPENAI_API_KEY"}},
        "models": {"default": model},
        "agents": {"default": {"provider": "openai", "fastModel": FAST_MODEL}},
        "context": context,
    }
