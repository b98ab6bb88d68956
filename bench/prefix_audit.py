"""Where the forwarded prompt's cached prefix breaks: replay transcripts, diff consecutive bodies.

Providers cache a prompt's byte-identical prefix (OpenAI: 1024 tokens and more, automatically;
Anthropic: up to a ``cache_control`` breakpoint), with the tools ahead of the messages. This
replays files through the real proxy (``bench.replay_driver``) in front of a recording upstream
that keeps each request's raw bytes, renders each main-model request as the provider reads it
(the ``tools`` array, then each message, as sent: key order and values kept) and, for each
consecutive pair of a session, finds the longest common byte prefix and what broke it: a
deliberate step (eviction, a new summary, the guard dropping rounds or leaving an optional block
out, the turn's tail block moving on) or something else, printed with the bytes around the
break so it can be judged.

Usage::

    python -m bench.prefix_audit --limit 32000 --files 1 2 --policies cascade-default

``--facts N`` stores N more facts in each file's global memory before it is replayed, so a
``cascade-perturn`` prompt's ``<memory>`` block is full from the first step (the steady state
of ``auto`` promotion, where the block's cut decides its bytes).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bench import trajectories
from bench.cost import get_tokenizer
from bench.embedding_wait import EmbeddingWait
from bench.replay_driver import cascade_proxy, replay_cascade, seed_facts
from bench.replay_policies import CASCADE_POLICIES, EMBED_MODEL, FAST_MODEL, PER_TURN_CONTEXT
from bench.replay_upstream import ReplayUpstream

__all__ = [
    "RawUpstream",
    "provider_view",
    "common_prefix",
    "classify",
    "audit",
    "filler_facts",
    "main",
]

CLEARED = "[context-cleared]"
TAIL_BLOCKS = ("<plan>", "<related_context>")


@dataclass
class RawUpstream(ReplayUpstream):
    """The replay upstream that also keeps each chat request's raw body bytes."""

    raw: list[tuple[str, int | None, bool, bytes]] = field(default_factory=list)

    async def _chat(self, request: Request) -> Response:
        body = await request.body()
        data = json.loads(body)
        with self._lock:
            session, step, _ = self._expected
        fast = data.get("model") == self.fast_model
        self.raw.append((session, step, fast, body))
        return await super()._chat(request)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def provider_view(body: Mapping[str, Any]) -> list[str]:
    """The request as a provider caches it: the tools first, then each message in order."""
    return [_dumps(body.get("tools") or []), *(_dumps(m) for m in body.get("messages") or ())]


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return str(content or "")


def classify(prev: Mapping[str, Any], cur: Mapping[str, Any]) -> tuple[str, int]:
    """Why ``cur`` does not extend ``prev`` (``"extends"`` when it does), and the element index
    (0 = tools, 1.. = messages) where the two first differ."""
    pv, cv = provider_view(prev), provider_view(cur)
    at = next((i for i, (a, b) in enumerate(zip(pv, cv, strict=False)) if a != b), None)
    if at is None:
        return ("extends" if len(cv) >= len(pv) else "shorter"), min(len(pv), len(cv))
    if at == 0:
        names = [
            [t.get("function", {}).get("name") for t in b.get("tools") or ()] for b in (prev, cur)
        ]
        return (
            "tools: "
            + ("same names, other bytes" if names[0] == names[1] else f"{names[0]} -> {names[1]}")
        ), 0
    pm, cm = prev["messages"][at - 1], cur["messages"][at - 1]
    pt, ct = _text(pm), _text(cm)
    if pv[at] in cv[at + 1 :] or cv[at] in pv[at + 1 :]:
        return "messages dropped (guard/compaction)", at
    if "<conversation_summary>" in ct and pt != ct:
        return "summary changed", at
    if ct.startswith(CLEARED) and not pt.startswith(CLEARED):
        return "evicted", at
    if pt.startswith(CLEARED) and ct.startswith(CLEARED):
        return "DEFECT? placeholder rewritten", at
    if at == len(pv) - 1 and any(b in pt and b not in ct for b in TAIL_BLOCKS):
        return "tail block moved on", at
    if pt.startswith(ct) and any(b in pt[len(ct) :] for b in TAIL_BLOCKS):
        return "optional block left out (guard)", at  # the turn's later steps leave it out too
    if "<memory>" in pt or "<memory>" in ct:
        return "memory block changed", at
    if len(cv) < len(pv) and (
        pm.get("role") == cm.get("role") == "assistant" or not set(pv[at:]) & set(cv)
    ):
        return "messages dropped (guard/compaction)", at  # every older round went
    return "OTHER", at


@dataclass
class PairStats:
    pairs: int = 0
    extends: int = 0
    shared: int = 0
    total: int = 0
    causes: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)


def audit(raw: Sequence[tuple[str, int | None, bool, bytes]], examples: int = 4) -> PairStats:
    """Prefix figures over consecutive main-model requests of each session."""
    stats = PairStats()
    last: dict[str, tuple[Mapping[str, Any], int | None]] = {}
    for session, step, fast, body in raw:
        if fast:
            continue
        cur = json.loads(body)
        if session in last:
            prev, pstep = last[session]
            pv, cv = "\n".join(provider_view(prev)), "\n".join(provider_view(cur))
            lcp = common_prefix(pv, cv)
            stats.pairs += 1
            stats.total += len(pv)
            stats.shared += lcp
            cause, at = classify(prev, cur)
            stats.extends += cause == "extends"
            stats.causes[cause] += 1
            if (
                cause.startswith(("OTHER", "DEFECT", "tools", "shorter"))
                and len(stats.examples) < examples
            ):
                where = f"element {at}, byte {lcp}/{len(pv)}"
                stats.examples.append(
                    f"{session} step {pstep}->{step} [{cause}] {where}:\n"
                    f"  prev: {pv[max(0, lcp - 150) : lcp + 250]!r}\n"
                    f"  cur:  {cv[max(0, lcp - 150) : lcp + 250]!r}"
                )
        last[session] = (cur, step)
    return stats


def filler_facts(n: int) -> list[str]:
    """``n`` distinct facts, each one the memory API stores, to fill the ``<memory>`` block."""
    return [f"fact {i:03d}: the staging build listens on port {8000 + i}." for i in range(n)]


def _run(
    files: Sequence[trajectories.TrajectoryFile], limit: int, policy: str, facts: int = 0
) -> None:
    tokenizer = get_tokenizer()
    upstream = RawUpstream(fast_model=FAST_MODEL, tokenizer=tokenizer)
    with upstream, cascade_proxy(limit, policy, upstream) as proxy:
        embedded = None
        if policy.startswith("cascade-perturn") and "retrieval" in PER_TURN_CONTEXT:
            embedded = EmbeddingWait.for_data_dir(proxy.workdir / "data", EMBED_MODEL)
        try:
            for tf in files:
                upstream.raw.clear()
                if facts:  # the key replay_cascade sends, so the facts are the file's tenant's
                    key = f"replay-file-{tf.number}"
                    seed_facts(f"{proxy.base_url}/v1", key, filler_facts(facts))
                row = replay_cascade(
                    tf, policy, limit, tokenizer, base_url=f"{proxy.base_url}/v1",
                    upstream=upstream, embedded=embedded,
                )  # fmt: skip
                s = audit(upstream.raw)
                m = row.metrics
                print(
                    f"file {tf.number} {limit // 1000}k {policy}: cost {m.cache_weighted:.0f} "
                    f"over {m.over_limit} broken {m.broken_pairings} errors {row.errors}; "
                    f"{s.pairs} pairs, {s.extends} extend, byte prefix reuse "
                    f"{s.shared / max(1, s.total):.3f}; causes {dict(s.causes)}",
                    flush=True,
                )
                for ex in s.examples:
                    print(ex, flush=True)
        finally:
            if embedded is not None:
                embedded.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.prefix_audit", description=__doc__)
    parser.add_argument("--limit", type=int, action="append", required=True)
    parser.add_argument("--files", nargs="+", required=True)
    parser.add_argument(
        "--policies", nargs="+", default=["cascade-default"], choices=CASCADE_POLICIES
    )
    parser.add_argument("--conversations", type=int, default=None, help="the first N of each")
    parser.add_argument(
        "--facts", type=int, default=0, help="store N facts first (a full <memory> block)"
    )
    args = parser.parse_args(argv)
    if args.conversations is not None:
        load, n = trajectories.load, args.conversations
        trajectories.load = lambda tf: load(tf)[:n]  # type: ignore[assignment]
    files = [trajectories.resolve(f) for f in args.files]
    for limit in args.limit:
        for policy in args.policies:
            _run(files, limit, policy, args.facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
