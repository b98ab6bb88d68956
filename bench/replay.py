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
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from bench import headroom_env, trajectories
from bench.common import free_port, out_file
from bench.cost import Metrics, RequestLog, Tokenizer, get_tokenizer, measure
from bench.embedding_wait import EmbeddingWait
from bench.policies import POLICIES, make_policy
from bench.replay_ingest import IngestStats, ingest_report, render_ingest
from bench.replay_upstream import ReplayUpstream

__all__ = [
    "LIMITS",
    "CASCADE_POLICIES",
    "ALL_POLICIES",
    "Row",
    "offline_logs",
    "replay_offline",
    "send_steps",
    "seed_facts",
    "replay_cascade",
    "render_markdown",
    "render_chart",
    "main",
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
REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "out" / "replay.json"
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


# --- Cascade through the real proxy -------------------------------------------------------------


def proxy_config(limit: int, policy: str, upstream_url: str) -> dict[str, Any]:
    """The agents.json for one Cascade run: the limit, the fast model, summaries on or off."""
    context: dict[str, Any] = {}
    if policy == "cascade-nosummary":
        context["summarize"] = {"enabled": False}
    if policy.startswith("cascade-perturn"):
        context.update(PER_TURN_CONTEXT)
    if policy == "cascade-perturn-auto":
        context["memoryPromotion"] = {"mode": "auto"}
    return {
        "providers": {"openai": {"baseUrl": upstream_url, "apiKeyEnv": "OPENAI_API_KEY"}},
        "models": {"default": {"contextLimit": limit}},
        "agents": {"default": {"provider": "openai", "fastModel": FAST_MODEL}},
        "context": context,
    }


@dataclass
class ProxyProcess:
    """``python -m proxy serve`` from this repo, in its own process group, with its own data dir."""

    config: Mapping[str, Any]
    upstream_url: str
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> None:
        cfg = self.workdir / "agents.json"
        cfg.write_text(json.dumps(self.config, indent=2), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(
            OPENAI_BASE_URL=self.upstream_url,
            OPENAI_API_KEY="x",
            CASCADE_DATA_DIR=str(self.workdir / "data"),
            # The per-turn policies wait before each turn until the worker has embedded the
            # session (``EmbeddingWait``): at the default 1 s poll that wait is most of file
            # 8's replay (hundreds of turns); a replay has nobody else's statements to spare.
            CASCADE_EMBEDDING_POLL_SECONDS="0.05",
        )
        # Run the proxy package of the repo this bench lives in (a worktree, say), not whatever
        # copy is installed in the virtualenv: cwd and PYTHONPATH both point at REPO.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        )
        cmd = [sys.executable, "-m", "proxy", "serve", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--config", str(cfg)]
        log = (self.workdir / "proxy.log").open("wb")
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"cascade-proxy exited early:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"cascade-proxy not ready after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        path = self.workdir / "proxy.log"
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@contextmanager
def cascade_proxy(limit: int, policy: str, upstream: ReplayUpstream) -> Iterator[ProxyProcess]:
    with tempfile.TemporaryDirectory(prefix="cascade-replay-") as tmp:
        proxy = ProxyProcess(proxy_config(limit, policy, upstream.url), upstream.url, Path(tmp))
        try:
            proxy.start()
            yield proxy
        finally:
            proxy.stop()


def _session_id(tf: trajectories.TrajectoryFile, conv: str, limit: int, policy: str) -> str:
    raw = f"f{tf.number}-{conv}-{limit // 1000}k-{policy}"
    return re.sub(r"[^A-Za-z0-9._:-]", "_", raw)[:128]


def _tools_for(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Minimal schemas for the tools the transcript calls (the sources do not store them)."""
    names = {
        str(c["function"]["name"])
        for m in messages
        for c in m.get("tool_calls") or ()
        if (c.get("function") or {}).get("name")
    }
    return [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": f"The agent's {n} tool.",
                "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
            },
        }
        for n in sorted(names)
    ]


def send_steps(
    conversations: Sequence[trajectories.Conversation],
    *,
    base_url: str,
    upstream: ReplayUpstream,
    session_id: Callable[[str], str],
    api_key: str = "x",
    before_turn: Callable[[str], None] | None = None,
) -> int:
    """Send each step's recorded history to ``base_url`` in order; return the failed steps.

    Before each request the upstream is told which recorded reply answers it; the session id
    (``X-Session-Id``) is ``session_id(conversation id)``; ``api_key`` names the tenant.
    ``before_turn(session id)`` runs before each step whose history ends with a user message
    (one that may start a turn).
    """
    errors = 0
    with openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        for conv in conversations:
            sid = session_id(conv.id)
            tools = _tools_for(conv.messages)
            for step in trajectories.steps(conv):
                if before_turn is not None and step.prompt[-1].get("role") == "user":
                    before_turn(sid)
                upstream.expect(sid, step.index, step.reply)
                try:
                    client.chat.completions.create(
                        model=MAIN_MODEL,
                        messages=list(step.prompt),  # type: ignore[arg-type]
                        tools=tools or openai.NOT_GIVEN,  # type: ignore[arg-type]
                        extra_headers={"X-Session-Id": sid, "X-Replay-Step": f"{sid}#{step.index}"},
                        timeout=600,
                    )
                except openai.APIStatusError as exc:
                    errors += 1
                    print(f"  {sid} step {step.index}: HTTP {exc.status_code}", file=sys.stderr)
    return errors


def seed_facts(base_url: str, api_key: str, facts: Sequence[str]) -> None:
    """Store ``facts`` in the tenant's global memory through the memory API."""
    headers = {"authorization": f"Bearer {api_key}"}
    for text in facts:
        resp = httpx.post(f"{base_url}/memory", json={"text": text}, headers=headers, timeout=10)
        if resp.status_code not in (201, 400):  # 400: stored already (a rerun)
            raise RuntimeError(f"could not store a fact: HTTP {resp.status_code} {resp.text}")


def replay_cascade(
    tf: trajectories.TrajectoryFile,
    policy: str,
    limit: int,
    tokenizer: Tokenizer,
    *,
    base_url: str,
    upstream: ReplayUpstream,
    check_ingest: bool = False,
    embedded: EmbeddingWait | None = None,
) -> Row:
    """Send every step of the file to ``base_url``; measure what reached ``upstream``.

    ``base_url`` is the proxy's ``/v1`` URL (or the upstream's own, for a pass-through check:
    then the metrics equal the offline ``raw`` ones). Through a proxy (``check_ingest``) the
    row also says what the ingest stage did, and every compacted result is paged back from the
    proxy and compared with the original (``bench/replay_ingest.py``). With ``embedded``, each
    step that may start a turn waits for the session's messages to be embedded first (module
    docstring).
    """
    start = time.monotonic()
    upstream.drain()
    conversations = trajectories.load(tf)
    api_key = f"replay-file-{tf.number}"
    if policy.startswith("cascade-perturn"):
        seed_facts(base_url, api_key, SEED_FACTS)
    errors = send_steps(
        conversations,
        base_url=base_url,
        upstream=upstream,
        session_id=lambda conv: _session_id(tf, conv, limit, policy),
        api_key=api_key,
        before_turn=embedded.wait if embedded is not None else None,
    )
    upstream.wait_idle()
    if embedded is not None:
        sids = sorted({_session_id(tf, c.id, limit, policy) for c in trajectories.load(tf)})
        turns, found, failed = embedded.retrievals(sids)
        print(
            f"  retrieval: {turns} turns searched, {found} with hits, {failed} errors; "
            f"{embedded.waited:.1f}s waited for the embedder so far",
            file=sys.stderr,
        )
    logs = [RequestLog(r.session, r.messages, r.fast) for r in upstream.drain()]
    metrics = measure(logs, limit=limit, tokenizer=tokenizer)
    ingest = None
    if check_ingest:
        ingest = ingest_report(
            conversations,
            [(log.session, log.messages) for log in logs if not log.fast],
            base_url=base_url.removesuffix("/v1"),
            session_id=lambda conv: _session_id(tf, conv, limit, policy),
            tokenizer=tokenizer,
            api_key=api_key,
        )
    seconds = time.monotonic() - start
    return Row(tf.number, tf.name, policy, limit, metrics, errors, seconds, ingest)


def proxy_available() -> bool:
    return (REPO / "proxy" / "app.py").exists() and (REPO / "proxy" / "cli.py").exists()


# --- reports ----------------------------------------------------------------------------------


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


# --- CLI --------------------------------------------------------------------------------------


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__)
    parser.add_argument("--limit", type=int, action="append", help="repeatable; default 32k+128k")
    parser.add_argument("--files", nargs="+", default=None, help="numbers or names; default all")
    parser.add_argument("--policies", nargs="+", default=None, choices=ALL_POLICIES)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-cascade", action="store_true", help="offline policies only")
    return parser.parse_args(argv)


def run(
    files: Sequence[trajectories.TrajectoryFile],
    limits: Sequence[int],
    policies: Sequence[str],
    tokenizer: Tokenizer,
) -> list[Row]:
    rows: list[Row] = []
    for limit in limits:
        for pol in (p for p in policies if p in POLICIES):
            for tf in files:
                rows.append(replay_offline(tf, pol, limit, tokenizer))
                _progress(rows[-1])
        for pol in (p for p in policies if p in CASCADE_POLICIES):
            upstream = ReplayUpstream(fast_model=FAST_MODEL, tokenizer=tokenizer)
            with upstream, cascade_proxy(limit, pol, upstream) as proxy:
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
                        _progress(row)
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
        _progress(rows[-1])
    return rows


def _progress(row: Row) -> None:
    m = row.metrics
    print(
        f"file {row.file} {row.policy:<18} {row.limit // 1000:>4}k  cw={_k(m.cache_weighted):>6} "
        f"billed={_k(m.billed_main):>6} peak={_k(m.peak_prompt):>5} over={m.over_limit} "
        f"broken={m.broken_pairings} ({row.seconds:.1f}s)",
        file=sys.stderr,
    )


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
    rows = run(files, limits, policies, tokenizer)
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
