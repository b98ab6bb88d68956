"""config/agents.json, its ``context`` section: the blocks that steer the cascade's stages.

The section is the file's top-level ``context`` and each agent's ``agents.<name>.context``
(merged over it key by key, ``config.parse_config``). Its blocks are all the pure core
reads of the config, so the core imports this module and never the loader in ``config.py``.
The defaults carry the reasons they were chosen.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "Block",
    "ContextConfig",
    "ToolOutputConfig",
    "ObservationsConfig",
    "RedactionConfig",
    "EvictionConfig",
    "SummarizeConfig",
    "RecitationConfig",
    "RetrievalConfig",
    "MemoryPromotionConfig",
    "HandoffConfig",
    "unknown_key_hint",
]


def unknown_key_hint(loc: Sequence[str], kind: str) -> str | None:
    """For an unknown key (pydantic's ``extra_forbidden``), the key of the file it is closest
    to, if any: a typo (``timeoutSecond``) is named with the key it meant."""
    if kind != "extra_forbidden" or not loc:
        return None
    close = difflib.get_close_matches(str(loc[-1]), _known_keys(), n=1, cutoff=0.8)
    return f"did you mean {close[0]}?" if close else None


def _known_keys() -> set[str]:
    """Every key of every block of the file (each ``Block`` subclass's fields' aliases)."""
    found: set[str] = set()
    todo: list[type[BaseModel]] = [Block]
    while todo:
        block = todo.pop()
        todo.extend(block.__subclasses__())
        found |= {f.alias or n for n, f in block.model_fields.items() if not f.exclude}
    return found


class Block(BaseModel):
    """A block of agents.json: camelCase keys in the file, snake_case in Python; unknown keys
    rejected, so a typo shows up as ``config.rejected`` instead of silently doing nothing.
    A number must be finite: Python's JSON reader takes ``Infinity`` and reads ``1e999`` as
    infinity, which no setting means (a timeout is a number of seconds). A whole number is
    at most 2**53 (``MAX_WHOLE``): the reader takes any number of digits, and one past a
    float's range fails each request that takes it as a fraction of the window."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )

    @field_validator("*")
    @classmethod
    def _whole_in_range(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WHOLE:
            raise ValueError(f"at most {MAX_WHOLE} (2**53), the largest whole number kept exact")
        return value


MAX_WHOLE = 2**53
"""The largest whole number a key takes: exact as a float, as the stages and JSON readers
(the console's too) take it."""


class ToolOutputConfig(Block):
    enabled: bool = True
    """False leaves every result whole at ingestion (no cut, no marker): the overflow guard
    still keeps the prompt within the window. ``maxChars`` still sizes ``read_tool_output``'s
    pages, and lossless compaction (``compact``) still applies, to a result of any size."""
    max_chars: int = Field(default=24_000, ge=200)
    persist_raw: bool = True
    raw_cap_bytes: int = Field(default=8_388_608, gt=0)
    compact: bool = True
    compact_min_saving: float = Field(default=0.2, ge=0, le=1)
    """The lossless ingest stage rewrites a result only when that saves at least this share
    of its characters, marker included: a smaller saving does not pay for a text the model
    must read in an unfamiliar form (pretty-printed JSON saves 25-50%, so it passes)."""
    offer_without_tools: bool = False
    """Offer ``read_tool_output`` also to a request that sends no ``tools`` of its own (a
    text-action agent, such as smolagents' ``CodeAgent``, on a provider with tool support).
    Off by default: such a request may go to a model or server with no tool support, which
    fails on the array (``toolloop.carries_tools``)."""


class ObservationsConfig(Block):
    """Tool observations that text-action agents send as user messages (``observations.py``):
    a user message after an assistant message that starts with one of these is managed like
    a tool result once it is no longer the latest message. Empty turns it off."""

    user_prefixes: tuple[str, ...] = ("Observation:",)


class RedactionConfig(Block):
    enabled: bool = True
    patterns: tuple[str, ...] = ()
    default_patterns: bool = True


class EvictionConfig(Block):
    """Defaults tuned on the replay bench (``python -m bench.replay``, cache-weighted cost;
    the figures are in docs/perf.md).

    Every prompt token costs 0.1 while it stays in the cached prefix and 1.0 once something
    before it changes, so the per-step bill is ~0.1 x the prompt plus the misses. Evicting
    early keeps the prompt small, and one pass costs little as long as it reclaims more than
    it re-bills (the pure ``evict`` refuses passes that reclaim less than the suffix they
    turn into misses), so the trigger is low: ``atFraction`` 0.125. What an old result costs
    on each later step does not depend on the window's size, so the trigger is as low as the
    replay allows: 0.125 is the lowest tried at which a short session (one that peaks just past
    the trigger and ends) does not pay for a pass it does not live to earn back. Two
    protected rounds keep the result the model is acting on plus one before it; a third
    keeps several thousand tokens more on every step. ``clearAtLeast`` 2000 batches small
    passes; larger values leave big results in the prompt for longer.
    """

    enabled: bool = True
    at_fraction: float = Field(default=0.125, gt=0, le=1)
    keep_recent_rounds: int = Field(default=2, ge=0)
    clear_at_least: int = Field(default=2000, ge=0)
    min_result_tokens: int = Field(default=200, ge=0)
    exclude_tools: tuple[str, ...] = ()


class SummarizeConfig(Block):
    """Defaults tuned on the replay bench together with :class:`EvictionConfig`.

    A compaction re-bills the whole prompt after the first user message, so it should be rare
    and leave little behind. ``keepRecent`` 4 (two tool rounds) matches the two rounds that
    eviction protects: keeping more lets eviction clear the oldest kept rounds on the very
    next step, a second full miss. ``softFraction`` 0.6 starts the fold early enough in long
    text-heavy sessions whose results are too small to evict; the pure ``plan_compaction``
    refuses spans smaller than half the kept tail, which stops the fold-one-round-per-step
    loop a low soft threshold would otherwise cause.
    """

    enabled: bool = True
    background: bool = True
    soft_fraction: float = Field(default=0.6, gt=0, le=1)
    hard_fraction: float = Field(default=0.9, gt=0, le=1)
    keep_recent: int = Field(default=4, ge=0)
    reflect_tokens: int = Field(default=4000, gt=0)
    max_attempts: int = Field(default=3, ge=1, le=3)
    ledger_cap: int = Field(default=64, ge=0)
    """At most this many identifiers of a folded span (newest first) are appended under
    ``## Files & State`` when the model's summary left them out (``cascade/ledger.py``)."""
    timeout_seconds: float = Field(default=180, gt=0, le=3600)
    """The whole summary call's bound, its retries and reflection pass included: the
    provider's ``timeoutSeconds`` bounds each read only, and a request at ``hardFraction``
    waits on the call. Room for a slow fast model's 2,000-token answer, well under the
    provider's 600 s per read times ``maxAttempts``."""

    @model_validator(mode="after")
    def _soft_below_hard(self) -> SummarizeConfig:
        if self.soft_fraction > self.hard_fraction:
            raise ValueError("softFraction must not exceed hardFraction")
        return self


class RecitationConfig(Block):
    enabled: bool = False


class RetrievalConfig(Block):
    """``timeoutMs`` bounds the wait for the new turn's query embedding: past it the turn goes
    out without the block (a silent no-op, reported in ``context.retrieval``)."""

    enabled: bool = False
    min_score: float = Field(default=0.35, ge=-1, le=1)
    max_results: int = Field(default=4, ge=0, le=50)
    snippet_chars: int = Field(default=1200, gt=0)
    timeout_ms: int = Field(default=300, gt=0, le=60_000)


class MemoryPromotionConfig(Block):
    mode: Literal["off", "suggest", "auto"] = "off"


class HandoffConfig(Block):
    enabled: bool = False
    at_fraction: float = Field(default=0.9, gt=0, le=1)


class ContextConfig(Block):
    tool_output: ToolOutputConfig = ToolOutputConfig()
    redaction: RedactionConfig = RedactionConfig()
    observations: ObservationsConfig = ObservationsConfig()
    eviction: EvictionConfig = EvictionConfig()
    summarize: SummarizeConfig = SummarizeConfig()
    recitation: RecitationConfig = RecitationConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    memory_promotion: MemoryPromotionConfig = MemoryPromotionConfig()
    handoff: HandoffConfig = HandoffConfig()
