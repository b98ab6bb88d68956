"""Pure helpers of the growth benchmark and of `bench.run`: histories, counters, reports."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from bench.growth_report import aggregate, evaluate, render_markdown, rows_read
from bench.growth_scenario import build_history
from bench.run import part_commands
from bench.run_checks import replay_checks, replay_summary, retrieval_checks
from bench.run_report import render_results


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=2, max_value=120), st.integers(min_value=0, max_value=10**6))
def test_history_has_exact_length_and_agent_shape(n, seed):
    history = build_history(n, seed=seed, chars=20)
    assert len(history) == n
    assert history[0]["role"] == "system"
    assert history[-1]["role"] == "user"
    for i, m in enumerate(history):
        for call in m.get("tool_calls") or ():
            answer = history[i + 1]  # every call is answered right after it: pairing holds
            assert (answer["role"], answer["tool_call_id"]) == ("tool", call["id"])


def test_history_is_deterministic_per_seed_and_carries_tool_rounds():
    a, b = build_history(200, seed=3), build_history(200, seed=3)
    assert a == b
    assert a != build_history(200, seed=4)
    assert sum(1 for m in a if m["role"] == "tool") > 20
    assert len({m["content"] for m in a if m["role"] == "user"}) == sum(
        1 for m in a if m["role"] == "user"
    )  # no two user turns alike, so no hash or cache shortcut can collapse them


def test_history_needs_a_system_and_a_user_message():
    with pytest.raises(ValueError):
        build_history(1)


def test_rows_read_sums_sequential_and_index_fetches_per_table():
    before = {"messages": {"seq_tup_read": 10, "idx_tup_fetch": 5, "seq_scan": 1}}
    after = {
        "messages": {"seq_tup_read": 10, "idx_tup_fetch": 1005, "seq_scan": 9},
        "summaries": {"seq_tup_read": 3, "idx_tup_fetch": 2},
    }
    assert rows_read(before, after) == {"messages": 1000, "summaries": 5}


def _sample(mode, size, ms, **extra):
    return {"mode": mode, "size": size, "ms": ms, **extra}


def test_aggregate_takes_medians_ratios_and_rows_per_request():
    samples = [
        _sample("full", 100, 10.0, cpu_ms=4.0),
        _sample("full", 100, 12.0, cpu_ms=6.0),
        _sample("full", 5000, 30.0, cpu_ms=20.0),
        _sample("full", 5000, 50.0, cpu_ms=22.0),
    ]
    rows = [
        {"mode": "full", "size": 100, "requests": 5, "tables": {"messages": 500, "sessions": 45}},
        {"mode": "full", "size": 5000, "requests": 5, "tables": {"messages": 25000}},
    ]
    table = aggregate(samples, rows)["full"]
    assert table["100"]["p50_ms"] == 11.0
    assert table["5000"]["p50_ratio"] == 40.0 / 11.0
    assert table["5000"]["cpu_ms"] == 21.0
    assert table["100"]["rows_per_req"] == 109.0
    assert table["100"]["rows_sessions"] == 9.0
    assert table["5000"]["rows_ratio"] == 5000.0 / 109.0


def test_aggregate_reports_unknown_rows_without_a_rows_pass():
    table = aggregate([_sample("compacted", 100, 5.0), _sample("compacted", 1000, 6.0)], [])
    assert math.isnan(table["compacted"]["1000"]["rows_per_req"])
    assert math.isnan(evaluate(table)[1]["value"])
    assert evaluate(table)[1]["met"] is None


def test_evaluate_compares_the_largest_size_with_the_smallest():
    table = {
        "compacted": {
            "100": {"p50_ratio": 1.0, "rows_per_req": 20.0},
            "1000": {"p50_ratio": 9.0, "rows_per_req": 900.0},
            "5000": {"p50_ratio": 1.8, "rows_per_req": 23.0},
        },
        "full": {
            "100": {"p50_ratio": 1.0, "rows_per_req": 100.0},
            "5000": {"p50_ratio": 2.5, "rows_per_req": 5000.0},
        },
    }
    got = {t["target"]: t["met"] for t in evaluate(table)}
    assert got == {
        "compacted: latency 5000 vs 100": True,
        "compacted: rows read 1000 vs 100": False,  # every size counts, not just the largest
        "full: latency 5000 vs 100": False,
        "full: rows read 5000 vs 100": False,
    }


def test_rows_target_is_met_when_every_size_stays_flat():
    table = {"m": {"100": {"rows_per_req": 20.0}, "1000": {"rows_per_req": 22.0},
                   "5000": {"rows_per_req": 23.0}}}  # fmt: skip
    rows = evaluate(table)[1]
    assert (rows["target"], rows["met"]) == ("m: rows read 5000 vs 100", True)  # 23 <= 24


def test_markdown_shows_every_size_and_verdict():
    samples = [_sample("full", 100, 10.0), _sample("full", 1000, 30.0)]
    table = aggregate(samples, [])
    text = render_markdown({"meta": {}, "targets": evaluate(table), "table": table})
    assert "| 1,000 |" in text and "| 100 |" in text
    assert "**not met**" in text  # 3x is over the 2x target
    assert "unknown" in text  # no rows pass


# --- bench.run: the one command's pure helpers ---------------------------------------------


def _replay_row(policy, limit, cw, **extra):
    row = {"file": 1, "policy": policy, "limit": limit, "requests": 10, "over_limit": 0,
           "broken_pairings": 0, "errors": 0, "cache_weighted": cw, "cache_weighted_fast": 0.0,
           "billed_main": 0, "billed_fast": 0, "peak_prompt": 1000}  # fmt: skip
    return {**row, **extra}


def test_quick_commands_shrink_every_part(tmp_path):
    full, quick = part_commands(False, tmp_path), part_commands(True, tmp_path)
    assert "--quick" in quick["overhead"] and "--quick" in quick["growth"]
    assert "--quick" not in full["overhead"]
    assert quick["replay"][:6] == ["bench.replay", "--files", "1", "2", "--limit", "32000"]
    assert full["replay"] == ["bench.replay", "--out", str(tmp_path / "replay.json")]
    assert quick["retrieval"] == [
        "bench.retrieval",
        "--quick",
        "--out",
        str(tmp_path / "retrieval.json"),
    ]
    assert "--quick" not in full["retrieval"]


def test_replay_summary_totals_files_and_compares_with_raw():
    rows = [
        _replay_row("raw", 32000, 100.0),
        {**_replay_row("raw", 32000, 300.0), "file": 2},
        _replay_row("cascade-default", 32000, 150.0, cache_weighted_fast=50.0, over_limit=1),
        {**_replay_row("cascade-default", 32000, 100.0), "file": 2},
    ]
    cell = replay_summary(rows)[32000]["cascade-default"]
    assert (cell["files"], cell["cw_total"], cell["over_limit"]) == (2, 300.0, 1)
    assert cell["vs_raw"] == 0.75  # fast-model cost counts against Cascade
    checks = {c["target"]: c["met"] for c in replay_checks(replay_summary(rows))}
    assert checks["32k: requests over the limit"] is False
    assert checks["32k: cache-weighted cost vs raw"] is True


def test_replay_checks_are_unknown_without_a_raw_baseline():
    checks = replay_checks(replay_summary([_replay_row("cascade-default", 128000, 5.0)]))
    assert [c["met"] for c in checks if "vs raw" in c["target"]] == [None]


def test_results_report_failures_tallies_and_charts():
    meta = {"command": "python -m bench.run --quick", "when": "today", "machine": "box",
            "nproc": 2, "load_start": [1.0], "load_end": [2.0], "commit": "abc", "python": "3.11",
            "wall_s": 120.0, "quick": True}  # fmt: skip
    table = aggregate([_sample("full", 100, 10.0), _sample("full", 5000, 15.0)], [])
    parts = {
        "overhead": {"command": "python -m bench.overhead", "seconds": 6.0, "ok": False,
                     "error": "exit status 1"},
        "growth": {"command": "python -m bench.growth", "seconds": 60.0, "ok": True,
                   "data": {"targets": evaluate(table), "table": table}},
    }  # fmt: skip
    text = render_results(
        meta=meta,
        parts=parts,
        charts={"growth": ["charts/growth.png"]},
        reports={"growth": "reports/growth.md"},
    )
    assert "Full report: [reports/growth.md](reports/growth.md)." in text
    assert "| overhead | `python -m bench.overhead` | **failed**: exit status 1 |" in text
    assert "1/2 met (1 unknown)" in text  # latency met, rows unknown
    assert "![growth](charts/growth.png)" in text
    assert "`nproc` = 2" in text and "quick" in text


def test_results_report_the_retrieval_bars_as_targets():
    data = {
        "meta": {"size": 10000},
        "turns": {"on_p50_ms": 40.0, "off_p50_ms": 32.0, "ratio": 1.25},
        "embedding": {"worker_rate": 250.0, "embedder_alone_rate": 3000.0},
        "targets": {
            "added_p50_ms": {"value": 8.0, "bar": 15.0, "met": True},
            "embedding_rate": {"value": 250.0, "bar": 300.0, "met": False},
        },
    }
    checks = retrieval_checks(data)
    assert [(c["value"], c["limit"], c["met"]) for c in checks] == [
        (8.0, 15.0, True),
        (250.0, 300.0, False),
    ]
    meta = {"command": "python -m bench.run", "when": "today", "machine": "box", "nproc": 2,
            "load_start": [1.0], "load_end": [2.0], "commit": "abc", "python": "3.11",
            "wall_s": 120.0, "quick": False}  # fmt: skip
    parts = {"retrieval": {"command": "python -m bench.retrieval", "ok": True, "data": data}}
    text = render_results(meta=meta, parts=parts, charts={})
    assert "| retrieval | `python -m bench.retrieval` | 1/2 met |" in text
    assert "## Retrieval" in text and "250.0 messages/s" in text
    assert "| background embedding, one core (messages/s) | >= 300 | 250.00 | 300.00 " in text


def test_issue_targets_judge_cascade_per_file_against_the_right_baseline() -> None:
    from bench.run_checks import issue_targets

    def row(file: int, limit: int, policy: str, cost: float, over: int = 0) -> dict:
        return {
            "file": file,
            "limit": limit,
            "policy": policy,
            "cache_weighted": cost,
            "cache_weighted_fast": 0.0,
            "over_limit": over,
            "broken_pairings": 0,
            "errors": 0,
        }

    rows = [
        row(1, 32000, "clearing", 100.0),
        row(1, 32000, "masking", 200.0),
        row(1, 32000, "cascade-default", 79.0),
        row(6, 128000, "raw", 300.0, over=5),
        row(6, 128000, "clearing", 100.0),
        row(6, 128000, "cascade-default", 85.0),
        row(2, 128000, "raw", 100.0),
        row(2, 128000, "cascade-default", 104.0),
    ]
    ratios = {
        c["target"]: (c["value"], c["met"])
        for c in issue_targets(rows)
        if "cost ratio" in c["target"]
    }
    assert ratios["file 1 32k: cost ratio"] == (0.79, True)
    assert ratios["file 6 128k: cost ratio"] == (0.85, False)  # raw overflows: vs clearing
    assert ratios["file 2 128k: cost ratio"] == (1.04, True)  # raw fits: within 5% of raw


def test_ingest_targets_hold_the_long_files_to_issue_23s_bars() -> None:
    from bench.run_checks import ingest_targets

    def row(file: int, limit: int, cost: float, policy: str = "cascade-default") -> dict:
        return {"file": file, "limit": limit, "policy": policy, "cache_weighted": cost,
                "cache_weighted_fast": 50_000.0}  # fmt: skip

    rows = [
        row(2, 128000, 249_000.0),
        row(4, 128000, 225_000.0),
        row(1, 32000, 209_500.0),
        row(6, 32000, 300_000.0),
        row(2, 128000, 1.0, policy="cascade-nosummary"),
        row(3, 128000, 1.0),
    ]
    judged = {c["target"].split(":")[0]: (c["met"], c["limit"]) for c in ingest_targets(rows)}
    assert judged == {
        "file 2 128k": (True, 0.95 * 262_385),  # 249,266: the main model's cost only
        "file 4 128k": (False, 0.95 * 236_319),
        "file 1 32k": (False, 209_000),
        "file 6 32k": (True, 350_000),
    }


def test_results_give_the_overhead_ratios_round_by_round():
    meta = {"command": "python -m bench.run", "when": "today", "machine": "box", "nproc": 2,
            "load_start": [1.0], "load_end": [2.0], "commit": "abc", "python": "3.11",
            "wall_s": 120.0, "quick": False}  # fmt: skip
    data = {"targets": [], "round_ratios": {"tiny_c32": [10.01, 9.5], "large_c8": [5.2]}}
    parts = {
        "overhead": {
            "command": "python -m bench.overhead",
            "seconds": 6.0,
            "ok": True,
            "data": data,
        }
    }
    text = render_results(meta=meta, parts=parts, charts={})
    assert "tiny request, c=32: 10.01, 9.50; agent request ~200 KB, c=8: 5.20." in text


def test_charts_and_full_reports_are_copied_beside_results(tmp_path):
    from bench.run import _CHART_GLOBS, _copy

    out = tmp_path / "out"
    out.mkdir()
    for name in ("growth.md", "growth.png", "growth.json"):
        (out / name).write_text(name)
    assert _copy(out, _CHART_GLOBS["growth"], tmp_path / "charts") == ["charts/growth.png"]
    assert _copy(out, "growth.md", tmp_path / "reports") == ["reports/growth.md"]
    assert (tmp_path / "reports" / "growth.md").read_text() == "growth.md"
    assert _copy(out, "replay.md", tmp_path / "reports") == []  # a part that wrote none
