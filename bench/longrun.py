"""A long session through the real proxy: does a request cost more as the session ages?

``python -m bench.longrun --steps 2000 --limit 16000 --window 200 [--policy cascade-perturn]``

Real recorded content (every file's conversations, tool-call ids made unique per copy,
repeated) becomes one session of ``--steps`` model calls, sent to ``python -m proxy serve``
in front of :class:`bench.replay_upstream.ReplayUpstream` (which answers each call with its
recorded reply and the fast model with a briefing). Content is clipped (``--clip``) so the
resent bodies stay affordable; results stay long enough to be evicted. Every ``--window``
steps it prints the window's mean latency, the proxy's and PostgreSQL's CPU per request, the
rows each table returned per request (``seq_tup_read + idx_tup_fetch``), its scans per
request, the index entries each index gave, and the tables' sizes: a cost that grows with the
session's age shows as a column that climbs from window to window. The statistics are
published by the backends lazily (about once a second), so a window's split is approximate.

At the end it times the session API's reads of the long session, and prints what each table
holds. ``--pglog DIR`` logs every statement's duration (``log_min_duration_statement = 0``)
and copies the data directory, log included, to ``DIR``: a statement whose duration climbs
over the run is the one to ``--explain`` (SQL run on the proxy's database at the end).
``--reserved`` sets ``reservedOutput`` as a share of the limit (an 8k window needs 0.125).
``--profile FILE`` runs cProfile in the proxy over the last ``--profile-steps`` steps and
prints the top costs per request (``bench.longrun_profile``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import httpx

from bench import longrun_profile, trajectories
from bench.growth_setup import Cpu, embedded_dsn
from bench.replay_driver import _tools_for, cascade_proxy
from bench.replay_policies import MAIN_MODEL
from bench.replay_upstream import ReplayUpstream

TABLES = (
    "messages",
    "sessions",
    "events",
    "summaries",
    "tool_raw_outputs",
    "tool_raw_output_versions",
    "message_embeddings",
    "memory",
)


def _clip(msg: dict[str, Any], clip: int) -> dict[str, Any]:
    out = dict(msg)
    content = out.get("content")
    if isinstance(content, str):
        limit = clip * 3 if out.get("role") == "tool" else clip
        out["content"] = content[:limit]
    elif isinstance(content, list):
        out["content"] = " ".join(str(p.get("text", "")) for p in content)[:clip]
    return out


def long_history(steps: int, clip: int) -> list[dict[str, Any]]:
    """System prompt, then every conversation's complete rounds, repeated until ``steps``."""
    pieces: list[list[dict[str, Any]]] = []
    system: dict[str, Any] | None = None
    for tf in trajectories.FILES:
        for conv in trajectories.load(tf):
            msgs = list(conv.messages)
            if msgs and msgs[0].get("role") == "system":
                system = system or dict(msgs[0])
                msgs = msgs[1:]
            ends = [
                i
                for i, m in enumerate(msgs)
                if m.get("role") == "assistant" and not m.get("tool_calls")
            ]
            if not ends or not msgs or msgs[0].get("role") != "user":
                continue
            pieces.append(msgs[: ends[-1] + 1])
    out: list[dict[str, Any]] = [_clip(system or {"role": "system", "content": "agent"}, clip)]
    copy = 0
    while sum(1 for m in out if m.get("role") == "assistant") < steps + 1:
        for n, piece in enumerate(pieces):
            tag = f"_{copy}_{n}"
            for m in piece:
                m = _clip(m, clip)
                if m.get("tool_calls"):
                    m["tool_calls"] = [{**c, "id": f"{c.get('id')}{tag}"} for c in m["tool_calls"]]
                if m.get("role") == "tool":
                    m["tool_call_id"] = f"{m.get('tool_call_id')}{tag}"
                out.append(m)
        copy += 1
    return out


async def _stats(conn: Any) -> dict[str, dict[str, int]]:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = await conn.fetch(
        """SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0) AS idx_scan,
                  coalesce(idx_tup_fetch, 0) AS idx_tup_fetch, n_tup_ins, n_tup_upd, n_tup_del,
                  pg_total_relation_size(relid) AS bytes
           FROM pg_stat_user_tables WHERE relname = any($1::text[])""",
        list(TABLES),
    )
    out = {r["relname"]: {k: int(v) for k, v in dict(r).items() if k != "relname"} for r in rows}
    idx = await conn.fetch(
        "SELECT indexrelname, idx_tup_read FROM pg_stat_user_indexes"
        " WHERE relname = any($1::text[])",
        list(TABLES),
    )
    out["_idx"] = {r[0]: int(r[1]) for r in idx}
    return out


def _report(
    steps: int,
    n: int,
    lat: list[float],
    cpu: tuple[tuple[float, float], tuple[float, float]],
    before: dict[str, Any],
    now: dict[str, Any],
) -> None:
    """One window's line: per request, its latency, CPU, rows read, scans and inserts."""
    k = len(lat)

    def d(table: str, *cols: str) -> float:
        return sum(now[table][c] - before[table][c] for c in cols) / k

    rows = [
        d(t, "seq_tup_read", "idx_tup_fetch")
        for t in ("messages", "events", "summaries", "tool_raw_outputs", "sessions")
    ]
    scans = sum(d(t, "seq_scan", "idx_scan") for t in TABLES)
    ins = sum(d(t, "n_tup_ins") for t in TABLES)
    mb = [now[t]["bytes"] / 1e6 for t in ("messages", "events", "tool_raw_outputs")]
    (p0, g0), (p1, g1) = cpu
    print(
        f"{steps:5d} {n:5d} {1000 * sum(lat) / k:7.1f} "
        f"{1000 * (p1 - p0) / k:8.1f} {1000 * (g1 - g0) / k:6.1f}  "
        + " ".join(f"{r:7.1f}" for r in rows)
        + f"  {scans:6.1f} {ins:6.1f}  "
        + " ".join(f"{x:6.2f}" for x in mb),
        flush=True,
    )
    grew = {i: (v - before["_idx"].get(i, 0)) / k for i, v in now["_idx"].items()}
    print(
        "    index entries read/req:",
        ", ".join(f"{i} {v:.1f}" for i, v in sorted(grew.items()) if v >= 0.5),
        flush=True,
    )


def _pages(base_url: str, sid: str, n: int) -> None:
    """Time the session API's reads of the long session (the console's first load reads these)."""
    hdr = {"authorization": "Bearer x"}
    urls = [
        f"/v1/sessions/{sid}",
        f"/v1/sessions/{sid}/messages?limit=1000",
        f"/v1/sessions/{sid}/messages?limit=1000&offset={max(0, n - 1000)}",
        f"/v1/sessions/{sid}/messages?limit=1000&offset={max(0, n - 1000)}&form=sent",
        f"/v1/sessions/{sid}/messages?limit=10000&include_superseded=true",
    ]
    with httpx.Client(base_url=base_url, timeout=120, headers=hdr) as client:
        for url in urls:
            t = time.perf_counter()
            resp = client.get(url)
            ms = 1000 * (time.perf_counter() - t)
            print(f"  GET {url}: {resp.status_code} {len(resp.content) / 1e6:.2f} MB {ms:.0f} ms")


def run(args: argparse.Namespace) -> None:
    history = long_history(args.steps, args.clip)
    calls = trajectories.conversation_steps(history)[: args.steps]
    tools = _tools_for(history)
    print(f"{len(history)} messages, {len(calls)} steps", file=sys.stderr)
    overrides = json.loads(args.context) if args.context else None
    if args.profile:
        longrun_profile.install(args.profile)
    profile_from, profiled = longrun_profile.window(len(calls), args.profile_steps)
    with (
        ReplayUpstream() as up,
        cascade_proxy(args.limit, args.policy, up, overrides, args.reserved or None) as proxy,
    ):
        import asyncpg

        loop = asyncio.new_event_loop()
        dsn = embedded_dsn(proxy.workdir / "data" / "pgdata")
        conn = loop.run_until_complete(asyncpg.connect(dsn))
        assert proxy.proc is not None
        cpu = Cpu(proxy.proc.pid, proxy.workdir / "data" / "pgdata")
        encoded = [json.dumps(m).encode() for m in history]
        head = b'{"model":"%s","tools":%s,"messages":[' % (
            MAIN_MODEL.encode(),
            json.dumps(tools).encode(),
        )
        sid = "longrun"
        hdr = {"authorization": "Bearer x", "content-type": "application/json", "x-session-id": sid}
        before, cpu0 = loop.run_until_complete(_stats(conn)), cpu.read()
        lat: list[float] = []
        errors = 0
        print(
            "steps  msgs  ms/req  proxy_ms  pg_ms  rows/req(messages,events,summ,raw,sess)  "
            "scans/req  ins/req  MB(messages,events,raw)",
            flush=True,
        )
        if args.pglog:
            loop.run_until_complete(conn.execute("ALTER SYSTEM SET log_min_duration_statement = 0"))
            loop.run_until_complete(conn.execute("SELECT pg_reload_conf()"))
            print(
                "logging",
                loop.run_until_complete(
                    conn.fetch(
                        "SELECT name, setting FROM pg_settings WHERE name IN "
                        "('logging_collector','log_directory','log_filename','data_directory')"
                    )
                ),
                file=sys.stderr,
            )
        with httpx.Client(base_url=proxy.base_url, timeout=600) as client:
            for step in calls:
                if args.profile and step.index == profile_from:
                    longrun_profile.start(proxy.proc.pid)
                up.expect(sid, step.index, step.reply)
                n = len(step.prompt)
                body = head + b",".join(encoded[:n]) + b"]}"
                t = time.perf_counter()
                resp = client.post("/v1/chat/completions", content=body, headers=hdr)
                lat.append(time.perf_counter() - t)
                if resp.status_code != 200:
                    errors += 1
                    if errors < 5:
                        print(
                            f"step {step.index}: {resp.status_code} {resp.text[:200]}",
                            file=sys.stderr,
                        )
                if (step.index + 1) % args.window == 0:
                    up.drain()
                    now, cpu1 = loop.run_until_complete(_stats(conn)), cpu.read()
                    _report(step.index + 1, n, lat, (cpu0, cpu1), before, now)
                    before, cpu0, lat = now, cpu1, []
        if args.profile:
            longrun_profile.stop_and_print(proxy.proc.pid, args.profile, profiled)
        _pages(proxy.base_url, sid, 2 * len(calls))
        for sql in (
            "SELECT name, count(*), sum(pg_column_size(data)) FROM events GROUP BY 1",
            "SELECT role, count(*), sum(pg_column_size(message)), sum(pg_column_size(placeholder)) "
            "FROM messages GROUP BY 1",
            "SELECT count(*), sum(pg_column_size(content)), sum(tokens) FROM summaries",
            "SELECT count(*), sum(pg_column_size(content)) FROM tool_raw_outputs",
            "SELECT indexrelname, idx_scan, idx_tup_read, idx_tup_fetch FROM pg_stat_user_indexes "
            "WHERE relname = 'messages'",
            "SELECT seq_scan, seq_tup_read FROM pg_stat_user_tables WHERE relname = 'messages'",
            *args.explain,
        ):
            for r in loop.run_until_complete(conn.fetch(sql)):
                print(" ", *r)
        loop.run_until_complete(conn.close())
        if args.pglog:
            import shutil

            shutil.copytree(
                proxy.workdir / "data",
                args.pglog,
                ignore=shutil.ignore_patterns("*.so", ".s.PGSQL.*"),
                dirs_exist_ok=True,
            )
        print(f"errors: {errors}; proxy log tail:\n{proxy.log_tail(5)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--limit", type=int, default=16000)
    p.add_argument("--window", type=int, default=200)
    p.add_argument("--clip", type=int, default=600)
    p.add_argument("--policy", default="cascade-default")
    p.add_argument("--context", default="", help="JSON context overrides")
    p.add_argument("--pglog", default="")
    p.add_argument("--reserved", type=float, default=0.0, help="reservedOutput, share of limit")
    p.add_argument("--explain", nargs="*", default=[])
    p.add_argument("--profile", default="", help="cProfile stats file of the proxy's last steps")
    p.add_argument("--profile-steps", type=int, default=200)
    run(p.parse_args(argv))


if __name__ == "__main__":
    main()
