"""The replay's tables: one markdown table per file, a bar chart of cost, a progress line."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from bench import headroom_env
from bench.replay_ingest import render_ingest
from bench.replay_policies import ALL_POLICIES, HEADROOM, Row

__all__ = ["render_markdown", "render_chart", "progress"]


def _k(n: float) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.2f}M"
    return f"{n / 1000:.0f}k" if n >= 1000 else f"{n:.0f}"


def render_markdown(rows: Sequence[Row]) -> str:
    """One table per file: a row per policy and limit, in the order the rows were produced."""
    out: list[str] = []
    for number in sorted({r.file for r in rows}):
        group = [r for r in rows if r.file == number]
        out += [f"### File {number}: `{group[0].name}`", ""]
        out.append(
            "| policy | limit | billed main | billed fast | peak prompt | over limit | "
            "broken pairs | prefix-identical | cache-weighted | cw fast | errors |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in sorted(group, key=lambda r: (r.limit, ALL_POLICIES.index(r.policy))):
            m = r.metrics
            out.append(
                f"| {r.policy} | {r.limit // 1000}k | {_k(m.billed_main)} | {_k(m.billed_fast)} "
                f"| {_k(m.peak_prompt)} | {m.over_limit}/{m.requests} | {m.broken_pairings} "
                f"| {m.prefix_identical:.0%} | {_k(m.cache_weighted)} "
                f"| {_k(m.cache_weighted_fast)} | {r.errors} |"
            )
        if any(r.policy == HEADROOM for r in group):
            out.append(f"\n{HEADROOM}: headroom-ai {headroom_env.VERSION}, {headroom_env.NOTE}.")
        out.append("")
    checked = [(r.file, r.limit, r.ingest) for r in rows if r.ingest is not None]
    if checked:
        out += [
            "### The ingest stage: results changed per transform, tokens saved per copy, "
            "compacted results paged back",
            "",
            render_ingest(checked),
            "",
        ]
    return "\n".join(out)


def render_chart(rows: Sequence[Row], path: Path) -> Path:
    """Grouped bars: cache-weighted cost per file and policy, one panel per limit."""
    import matplotlib  # heavy; only the report needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    limits = sorted({r.limit for r in rows})
    files = sorted({r.file for r in rows})
    policies = [p for p in ALL_POLICIES if any(r.policy == p for r in rows)]
    fig, axes = plt.subplots(len(limits), 1, figsize=(max(8, 1.6 * len(files)), 4 * len(limits)))
    axes = [axes] if len(limits) == 1 else list(axes)
    width = 0.8 / max(1, len(policies))
    for ax, limit in zip(axes, limits, strict=True):
        for j, pol in enumerate(policies):
            values = []
            for f in files:
                hit = [r for r in rows if (r.file, r.policy, r.limit) == (f, pol, limit)]
                m = hit[0].metrics if hit else None
                values.append((m.cache_weighted + m.cache_weighted_fast) / 1000 if m else 0)
            xs = [i + (j - (len(policies) - 1) / 2) * width for i in range(len(files))]
            ax.bar(xs, values, width, label=pol)
        ax.set_xticks(range(len(files)), [f"file {f}" for f in files])
        ax.set_ylabel("cache-weighted input (k tokens)")
        ax.set_title(f"Cache-weighted cost at a {limit // 1000}k limit (lower is better)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def progress(row: Row) -> None:
    m = row.metrics
    print(
        f"file {row.file} {row.policy:<18} {row.limit // 1000:>4}k  cw={_k(m.cache_weighted):>6} "
        f"billed={_k(m.billed_main):>6} peak={_k(m.peak_prompt):>5} over={m.over_limit} "
        f"broken={m.broken_pairings} ({row.seconds:.1f}s)",
        file=sys.stderr,
    )
