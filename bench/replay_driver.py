"""The replay's driver: the proxy in its own process, each recorded step sent through it.

:func:`replay_cascade` sends every step of a file to a proxy's ``/v1`` URL (Cascade's, run by
:class:`ProxyProcess`, or Headroom's) and measures what reached the recording upstream
(:mod:`bench.replay_upstream`).
"""

from __future__ import annotations

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

from bench import trajectories
from bench.common import free_port
from bench.cost import RequestLog, Tokenizer, measure
from bench.embedding_wait import EmbeddingWait
from bench.replay_ingest import ingest_report
from bench.replay_policies import MAIN_MODEL, SEED_FACTS, Row, proxy_config
from bench.replay_upstream import ReplayUpstream
from bench.tiktoken_cache import write_o200k

__all__ = [
    "REPO",
    "ProxyProcess",
    "proxy_env",
    "cascade_proxy",
    "send_steps",
    "seed_facts",
    "replay_cascade",
    "proxy_available",
]

REPO = Path(__file__).resolve().parents[1]


def proxy_env(workdir: Path, upstream_url: str) -> dict[str, str]:
    """The proxy process's environment: its upstream, its data dir under ``workdir``, and
    tiktoken's ``o200k_base`` (written under ``workdir`` unless ``TIKTOKEN_CACHE_DIR`` is
    set), so it counts prompts as deployed, not with the offline estimate."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        OPENAI_BASE_URL=upstream_url,
        OPENAI_API_KEY="x",
        CASCADE_DATA_DIR=str(workdir / "data"),
        # The per-turn policies wait before each turn until the worker has embedded the
        # session (``EmbeddingWait``): at the default 1 s poll that wait is most of file
        # 8's replay (hundreds of turns); a replay has nobody else's statements to spare.
        CASCADE_EMBEDDING_POLL_SECONDS="0.05",
    )
    if "TIKTOKEN_CACHE_DIR" not in env and write_o200k(workdir / "tiktoken"):
        env["TIKTOKEN_CACHE_DIR"] = str(workdir / "tiktoken")
    # Run the proxy package of the repo this bench lives in (a worktree, say), not whatever
    # copy is installed in the virtualenv: cwd and PYTHONPATH both point at REPO.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


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
        env = proxy_env(self.workdir, self.upstream_url)
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
def cascade_proxy(
    limit: int,
    policy: str,
    upstream: ReplayUpstream,
    overrides: Mapping[str, Any] | None = None,
    reserved_fraction: float | None = None,
) -> Iterator[ProxyProcess]:
    config = proxy_config(limit, policy, upstream.url, overrides, reserved_fraction)
    with tempfile.TemporaryDirectory(prefix="cascade-replay-") as tmp:
        proxy = ProxyProcess(config, upstream.url, Path(tmp))
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
                    code = f" {exc.code}" if exc.code else ""
                    print(
                        f"  {sid} step {step.index}: HTTP {exc.status_code}{code}", file=sys.stderr
                    )
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
