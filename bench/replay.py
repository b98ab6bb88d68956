"""Token savings on real transcripts: replay every recorded model call under each policy.

For each file, model limit and policy it reports billed input tokens (main and fast model),
the peak prompt, steps over the limit, broken tool pairings, the fraction of consecutive prompts
that are message-level prefix-identical, and the cache-weighted cost (``bench/cost.py``).

- ``raw``, ``clearing``, ``clearing-5k``, ``masking`` (``bench/policies.py``) are computed
  offline: the policy is applied to each step's recorded history.
- ``cascade-default`` and ``cascade-nosummary`` run the real proxy as a subprocess in front of
  ``bench/replay_upstream.py``; each step's recorded history is sent through it with the
  ``openai`` SDK, and the metrics are computed from what the upstream received (fast-model
  summarisation calls are counted separately).
- ``cascade-perturn`` is the defaults plus the per-turn stages (``PER_TURN_CONTEXT``):
  recitation, retrieval (the builtin embedder), and memory (promotion ``suggest``) with two
  facts stored before each file, so every prompt carries a ``<memory>`` block. Before each
  step that starts a turn the replay waits until the proxy's background worker has embedded
  every stored message of the session (``bench/embedding_wait.py``), and the query's
  embedding may take up to ``timeoutMs`` 10 s: what a turn retrieves does not depend on the
  worker's progress or the machine's load, so the runs are reproducible.
  ``cascade-perturn-auto`` also lets promotion store the facts it extracts after each
  compaction (``auto``): the block then changes at the next turn, a miss of the whole
  prompt, and the metrics count it.

Each file is replayed as its own tenant (its own bearer token), so the facts one file's
compactions promote never reach another file's prompts.

Files are numbered in SOURCES.md order (``bench/trajectories.py``). Usage::

    python -m bench.replay --limit 32000 --limit 128000 --files 1 2 4 6 \\
        --policies raw clearing masking --out bench/out/replay.json
    python -m bench.replay --limit 4000 --limit 8000 --files 5 --reserved-fraction 0.125 \\
        --policies cascade-default cascade-perturn
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import headroom_env, trajectories
from bench.common import out_file
from bench.cost import Tokenizer, get_tokenizer
from bench.embedding_wait import EmbeddingWait
from bench.policies import POLICIES
from bench.replay_driver import REPO, cascade_proxy, proxy_available, replay_cascade
from bench.replay_policies import (
    ALL_POLICIES,
    CASCADE_POLICIES,
    DEFAULT_POLICIES,
    EMBED_MODEL,
    FAST_MODEL,
    HEADROOM,
    LIMITS,
    PER_TURN_CONTEXT,
    Row,
    replay_offline,
)
from bench.replay_tables import progress, render_chart, render_markdown
from bench.replay_upstream import ReplayUpstream

__all__ = ["run", "main"]

DEFAULT_OUT = REPO / "bench" / "out" / "replay.json"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__)
    parser.add_argument("--limit", type=int, action="append", help="repeatable; default 32k+128k")
    parser.add_argument("--files", nargs="+", default=None, help="numbers or names; default all")
    parser.add_argument("--policies", nargs="+", default=None, choices=ALL_POLICIES)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-cascade", action="store_true", help="offline policies only")
    parser.add_argument(
        "--context",
        type=_context,
        default=None,
        help="JSON object of context blocks merged over the Cascade policies' config, "
        'e.g. \'{"eviction": {"atFraction": 0.1}}\'',
    )
    parser.add_argument(
        "--reserved-fraction",
        type=float,
        default=None,
        help="the Cascade policies' reservedOutput as a share of each limit (default: 4096 "
        "tokens, all of a 4k window), e.g. 0.125",
    )
    return parser.parse_args(argv)


def _context(text: str) -> dict[str, dict[str, Any]]:
    value = json.loads(text)
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise argparse.ArgumentTypeError("--context must be a JSON object of objects")
    return value


def run(
    files: Sequence[trajectories.TrajectoryFile],
    limits: Sequence[int],
    policies: Sequence[str],
    tokenizer: Tokenizer,
    overrides: Mapping[str, Any] | None = None,
    reserved_fraction: float | None = None,
) -> list[Row]:
    rows: list[Row] = []
    for limit in limits:
        for pol in (p for p in policies if p in POLICIES):
            for tf in files:
                rows.append(replay_offline(tf, pol, limit, tokenizer))
                progress(rows[-1])
        for pol in (p for p in policies if p in CASCADE_POLICIES):
            upstream = ReplayUpstream(fast_model=FAST_MODEL, tokenizer=tokenizer)
            proxy_cm = cascade_proxy(limit, pol, upstream, overrides, reserved_fraction)
            with upstream, proxy_cm as proxy:
                embedded = None
                if pol.startswith("cascade-perturn") and "retrieval" in PER_TURN_CONTEXT:
                    embedded = EmbeddingWait.for_data_dir(proxy.workdir / "data", EMBED_MODEL)
                try:
                    for tf in files:
                        url = f"{proxy.base_url}/v1"
                        row = replay_cascade(
                            tf, pol, limit, tokenizer, base_url=url, upstream=upstream,
                            embedded=embedded, check_ingest=True,
                        )  # fmt: skip
                        rows.append(row)
                        progress(row)
                finally:
                    if embedded is not None:
                        embedded.close()
        if HEADROOM in policies:
            rows += _replay_headroom(files, limit, tokenizer)
    return rows


def _replay_headroom(
    files: Sequence[trajectories.TrajectoryFile], limit: int, tokenizer: Tokenizer
) -> list[Row]:
    """The reference rows: each file through Headroom's proxy (a fresh one per file, so no
    state carries over), measured like Cascade's; none when Headroom cannot be installed."""
    env = headroom_env.ensure()
    if not env.available:
        print(f"headroom: skipped ({env.reason})", file=sys.stderr)
        return []
    rows: list[Row] = []
    for tf in files:
        upstream = ReplayUpstream(fast_model=FAST_MODEL, tokenizer=tokenizer)
        with upstream, headroom_env.serving(env, upstream.url) as url:
            rows.append(
                replay_cascade(tf, HEADROOM, limit, tokenizer, base_url=url, upstream=upstream)
            )
        progress(rows[-1])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    limits = args.limit or list(LIMITS)
    files = [trajectories.resolve(f) for f in args.files] if args.files else trajectories.FILES
    policies = list(args.policies or DEFAULT_POLICIES)
    if args.no_cascade or not proxy_available():
        if not args.no_cascade and any(p in CASCADE_POLICIES for p in policies):
            print("cascade-proxy is not runnable yet: skipping Cascade policies", file=sys.stderr)
        policies = [p for p in policies if p not in (*CASCADE_POLICIES, HEADROOM)]
    tokenizer = get_tokenizer()
    rows = run(files, limits, policies, tokenizer, args.context, args.reserved_fraction)
    args.out = out_file(args.out, "replay.json")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "tokenizer": tokenizer.name,
        "limits": limits,
        "policies": policies,
        "rows": [r.as_dict() for r in rows],
    }
    args.out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    args.out.with_suffix(".md").write_text(render_markdown(rows), encoding="utf-8")
    render_chart(rows, args.out.with_suffix(".png"))
    print(render_markdown(rows))
    print(f"wrote {args.out} (+ .md, .png)", file=sys.stderr)
    lost = [f for r in rows if r.ingest is not None for f in r.ingest.failures]
    for failure in lost:
        print(f"not recoverable byte for byte: {failure}", file=sys.stderr)
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
